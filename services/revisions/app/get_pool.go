package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// GetPool reads one pool: live from the read model, or as of At rebuilt
// from its events.
type GetPool struct {
	Org, Name  string
	At         events.Position
	MinVersion uint64
}

// GetPool serves live reads from the read model and time travel
// from the log.
func (a *App) GetPool(ctx context.Context, q GetPool) (PoolRecord, error) {
	if err := ids(q.Org, "name", q.Name); err != nil {
		return PoolRecord{}, err
	}
	if !q.At.IsZero() {
		rec, err := loadAt[PoolRecord](ctx, a, poolRef(q.Org, q.Name), q.At)
		if err != nil {
			return PoolRecord{}, err
		}
		if rec.Version == 0 {
			return PoolRecord{}, errs.NotFound("pool %q did not exist at that point", q.Name)
		}
		return *rec, nil
	}
	return a.livePool(ctx, q.Org, q.Name, q.MinVersion)
}

// livePool returns a live pool from the read model. A miss may only mean that
// this replica has not applied the pool's events yet (it was just created,
// through another replica say), so the model first catches up with the
// log's head and is asked again.
func (a *App) livePool(ctx context.Context, org, name string, minVersion uint64) (PoolRecord, error) {
	if err := a.waitFor(ctx, minVersion); err != nil {
		return PoolRecord{}, err
	}
	rec, ok := a.Model.Pool(org, name)
	if !ok || !live(&rec.State) {
		if err := a.catchUp(ctx); err != nil {
			return PoolRecord{}, err
		}
		if rec, ok = a.Model.Pool(org, name); !ok || !live(&rec.State) {
			return PoolRecord{}, notFound("pool", name)
		}
	}
	return rec, nil
}

// poolRevision returns revision n of a live pool, catching up with the log
// once if the model does not have it yet.
func (a *App) poolRevision(ctx context.Context, org, name string, n int) (PoolRecord, pool.Revision, error) {
	rec, err := a.livePool(ctx, org, name, 0)
	if err != nil {
		return PoolRecord{}, pool.Revision{}, err
	}
	rev, err := rec.State.Revision(n)
	if err != nil && len(rec.State.Revisions) < n {
		if err := a.catchUp(ctx); err != nil {
			return PoolRecord{}, pool.Revision{}, err
		}
		if rec, err = a.livePool(ctx, org, name, 0); err != nil {
			return PoolRecord{}, pool.Revision{}, err
		}
		rev, err = rec.State.Revision(n)
	}
	return rec, rev, err
}
