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

// DeletePool asks Machines (the registry, which owns machines)
// whether machines still belong to the pool, and refuses while any do, so
// that no machine is left in a pool that no longer exists. It returns the
// pool's final version.
func (a *App) DeletePool(ctx context.Context, cmd DeletePool) (uint64, error) {
	author, err := actor(ctx)
	if err != nil {
		return 0, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		return 0, err
	}
	rec, _, err := execute[PoolRecord](ctx, a, poolRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(ctx context.Context, r *PoolRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("pool", cmd.Name)
			}
			payloads, err := r.State.Delete(pool.Delete{DeletedBy: author})
			if err != nil || len(payloads) == 0 {
				return payloads, err
			}
			// Asked only once the domain would delete (a missing or
			// deleted pool is answered without the registry), and again
			// on every re-decision after a lost race.
			if err := a.mustBeEmpty(ctx, cmd.Org, cmd.Name); err != nil {
				return nil, err
			}
			return payloads, nil
		})
	if err != nil {
		return 0, err
	}
	return rec.Version, nil
}

// mustBeEmpty refuses while the registry counts machines in the pool
// (those still unassigning or being deleted count until they are done). A
// machine assigned between this answer and the append is not caught: the
// gateway's check that a pool exists before an assignment has the same
// window, and pre-registration may name any pool.
func (a *App) mustBeEmpty(ctx context.Context, org, name string) error {
	if a.Machines == nil {
		return errs.Internal("cannot delete pool %q: the service has no registry client to ask whether machines still belong to it", name)
	}
	n, err := a.Machines.CountMachines(ctx, org, name)
	if err != nil {
		return err
	}
	if n > 0 {
		return errs.Conflict("pool %q still has %d %s assigned; unassign %s first (POST /api/v1/orgs/%s/machines/{uuid}/unassign drains and releases one; "+
			"GET /api/v1/orgs/%s/machines?pool=%s lists them) or delete %s, then delete the pool",
			name, n, plural(n, "machine", "machines"), plural(n, "it", "them"), org, org, name, plural(n, "it", "them"))
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
