package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// ApplyRevision requests any existing revision for rollout: the latest,
// the current one again, or an older one (a rollback).
type ApplyRevision struct {
	Org, Pool       string
	Revision        int
	ExpectedVersion uint64
}

// ApplyRevision appends pool.apply_requested; the rollout service
// reacts to it.
func (a *App) ApplyRevision(ctx context.Context, cmd ApplyRevision) (PoolOutcome, error) {
	author, err := actor(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	var f errs.Fields
	checkOrg(&f, cmd.Org)
	checkName(&f, "pool", cmd.Pool)
	if cmd.Revision < 1 {
		f.Add("revision", "must be a revision number (1 or more)")
	}
	if err := f.Err(); err != nil {
		return PoolOutcome{}, err
	}
	cat, err := a.loadCatalog(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	rec, payloads, err := execute[PoolRecord](ctx, a, poolRef(cmd.Org, cmd.Pool), cmd.ExpectedVersion,
		func(ctx context.Context, r *PoolRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("pool", cmd.Pool)
			}
			cl, err := a.loadCluster(ctx, cmd.Org, r.State.Cluster)
			if err != nil {
				return nil, err
			}
			payloads, err := r.State.ApplyRevision(pool.ApplyRevision{Revision: cmd.Revision, RequestedBy: author, At: a.Now()},
				pool.Env{Catalog: cat.State.Catalog, Cluster: &cl.State})
			if err != nil {
				return nil, err
			}
			return payloads, a.checkAssets(ctx, &r.State, payloads)
		})
	if err != nil {
		return PoolOutcome{}, err
	}
	return outcome(rec, payloads), nil
}
