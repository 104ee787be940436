package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

// RenderMachine asks for the Ignition of revision Revision of a pool as a
// machine with the given hostname and labels boots it.
type RenderMachine struct {
	Org, Pool string
	Revision  int
	Settings  pool.MachineSettings
}

// RenderedMachine is the machine revision and its config, which still
// holds render.AgentCredentialPlaceholder.
type RenderedMachine struct {
	Machine  pool.MachineRevision
	Ignition []byte
}

// RenderMachine is the boot service's hot path: it reads the pool
// and cluster from the read model, opens the join material with the
// configured keys and renders through the cache, so a rack that powers on
// at once costs one Butane render per pool revision (render.Templates)
// and a cheap specialisation per distinct machine revision.
func (a *App) RenderMachine(ctx context.Context, q RenderMachine) (RenderedMachine, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	checkName(&f, "pool", q.Pool)
	if q.Revision < 1 {
		f.Add("revision", "must be a revision number (1 or more)")
	}
	f.Merge("", q.Settings.Validate())
	if err := f.Err(); err != nil {
		return RenderedMachine{}, err
	}
	rec, rev, err := a.poolRevision(ctx, q.Org, q.Pool, q.Revision)
	if err != nil {
		return RenderedMachine{}, err
	}
	cl, ok := a.Model.Cluster(q.Org, rec.State.Cluster)
	if !ok || !cl.State.Exists() {
		return RenderedMachine{}, errs.NotFound("cluster %q of pool %q not found", rec.State.Cluster, q.Pool)
	}
	join, err := cl.State.OpenJoin(a.Keys...)
	if err != nil {
		return RenderedMachine{}, err
	}
	m, err := pool.NewMachineRevision(q.Pool, rev, q.Settings)
	if err != nil {
		return RenderedMachine{}, err
	}
	opts, err := a.renderOptions(ctx, rev)
	if err != nil {
		return RenderedMachine{}, err
	}
	out, err := a.Renderer.Render(render.Input{Machine: m, Revision: rev, Join: join, Options: opts})
	if err != nil {
		return RenderedMachine{}, err
	}
	return RenderedMachine{Machine: m, Ignition: out}, nil
}
