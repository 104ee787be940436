package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// UpdatePool saves a pool's whole spec: "Save", or with Apply "Save &
// Apply".
type UpdatePool struct {
	Org, Name       string
	Spec            pool.Spec
	Message         string
	Apply           bool
	ExpectedVersion uint64
}

// UpdatePool makes at most one revision per save; the revision's
// number comes from the pool's folded state, and the optimistic append on
// the pool's subject makes it unique.
func (a *App) UpdatePool(ctx context.Context, cmd UpdatePool) (PoolOutcome, error) {
	author, err := actor(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		f := errs.Fields(errs.As(err).Fields)
		validationOnly(&f, cmd.Spec.Validate())
		return PoolOutcome{}, f.Err()
	}
	cat, err := a.loadCatalog(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	rec, payloads, err := execute[PoolRecord](ctx, a, poolRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(ctx context.Context, r *PoolRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("pool", cmd.Name)
			}
			cl, err := a.loadCluster(ctx, cmd.Org, r.State.Cluster)
			if err != nil {
				return nil, err
			}
			payloads, err := r.State.Update(pool.Update{
				Spec: cmd.Spec, Author: author, Message: cmd.Message, Apply: cmd.Apply, At: a.Now(),
			}, pool.Env{Catalog: cat.State.Catalog, Cluster: &cl.State})
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
