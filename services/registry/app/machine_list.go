package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// ListMachines returns one page of an organization's machines.
func (a *App) ListMachines(ctx context.Context, r api.MachineList) (api.MachinePage, error) {
	var f errs.Fields
	validOrg(&f, r.Org)
	if err := f.Err(); err != nil {
		return api.MachinePage{}, err
	}
	if err := a.listCaughtUp(ctx, r.MinVersion); err != nil {
		return api.MachinePage{}, err
	}
	page, err := a.Machines.Model().List(r.Org, readmodel.Filter{
		Pool: r.Pool, Status: machine.Status(r.Status), Selector: r.Selector, Cursor: r.Cursor, Limit: r.Limit,
	})
	if err != nil {
		return api.MachinePage{}, err
	}
	out := api.MachinePage{Items: make([]api.Machine, len(page.Items)), Next: page.Next}
	for i, m := range page.Items {
		out.Items[i] = view(m)
	}
	return out, nil
}

func view(m readmodel.Machine) api.Machine {
	out := wire.Machine(m.Org, m.Shown())
	out.CreatedAt, out.UpdatedAt, out.LastSeen = m.CreatedAt, m.UpdatedAt, m.LastSeen
	return out
}

// ListMachinesJSON is ListMachines answered with the read model's encoded
// page (the same JSON, without encoding each machine again), appended to
// dst (see command.HandleAppend).
func (a *App) ListMachinesJSON(ctx context.Context, r api.MachineList, dst []byte) ([]byte, error) {
	var f errs.Fields
	validOrg(&f, r.Org)
	if err := f.Err(); err != nil {
		return dst, err
	}
	if err := a.listCaughtUp(ctx, r.MinVersion); err != nil {
		return dst, err
	}
	return a.Machines.Model().AppendListJSON(dst, r.Org, readmodel.Filter{
		Pool: r.Pool, Status: machine.Status(r.Status), Selector: r.Selector, Cursor: r.Cursor, Limit: r.Limit,
	})
}

// listCaughtUp waits, briefly, until the projection applied min. A list
// has no log to fall back on: a projection that stays behind answers
// "try again" rather than a page without the write the caller asked for
// (which a cache in front of the registry would keep, too).
func (a *App) listCaughtUp(ctx context.Context, min uint64) error {
	if a.caughtUp(ctx, min) {
		return nil
	}
	return errs.Unavailable("the registry's machines are behind stream sequence %d; try again", min)
}
