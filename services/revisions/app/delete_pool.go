package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// DeletePool deletes a pool; its name is never reused.
type DeletePool struct {
	Org, Name       string
	ExpectedVersion uint64
}

// DeletePoolHandler asks Machines (when configured) whether machines still
// belong to the pool, and refuses while any do.
type DeletePoolHandler struct{ *base }

// Handle returns the pool's final version.
func (h DeletePoolHandler) Handle(ctx context.Context, cmd DeletePool) (uint64, error) {
	author, err := actor(ctx)
	if err != nil {
		return 0, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		return 0, err
	}
	if h.Machines != nil {
		n, err := h.Machines.CountMachines(ctx, cmd.Org, cmd.Name)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			return 0, errs.Conflict("pool %q still has %d machine(s); move or delete them first", cmd.Name, n)
		}
	}
	rec, _, err := execute[PoolRecord](ctx, h.base, poolRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(_ context.Context, r *PoolRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("pool", cmd.Name)
			}
			return r.State.Delete(pool.Delete{DeletedBy: author})
		})
	if err != nil {
		return 0, err
	}
	return rec.Version, nil
}
