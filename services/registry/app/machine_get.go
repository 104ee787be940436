package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// GetMachine reads a machine from the projection, or, with At, rebuilds it
// from the log as it was at that sequence or instant.
func (a *App) GetMachine(ctx context.Context, r api.MachineGet) (api.MachineReply, error) {
	uuid, err := a.machineRef(r.Org, r.UUID)
	if err != nil {
		return api.MachineReply{}, err
	}
	if r.At == "" {
		m, err := a.Machines.Model().Get(r.Org, uuid)
		if err != nil {
			return api.MachineReply{}, err
		}
		return api.MachineReply{Machine: view(m), Version: m.Version}, nil
	}
	at, err := ParseAt(r.At)
	if err != nil {
		return api.MachineReply{}, err
	}
	var s machine.State
	var version uint64
	var created, updated = events.Envelope{}, events.Envelope{}
	err = a.Store.Replay(ctx, events.Filter{Org: r.Org, AggregateType: machineType, AggregateID: uuid}, events.Position{}, at,
		func(e *events.Envelope) error {
			p, err := registry.Decode(e)
			if err != nil {
				return err
			}
			if !s.Exists() {
				created = *e
			}
			s.Apply(p)
			version, updated = e.Sequence, *e
			return nil
		})
	if err != nil {
		return api.MachineReply{}, err
	}
	if !s.Exists() {
		return api.MachineReply{}, errs.NotFound("machine %s did not exist at %s", uuid, r.At)
	}
	return api.MachineReply{Machine: api.Machine{Org: r.Org, State: s, CreatedAt: created.Time, UpdatedAt: updated.Time}, Version: version}, nil
}
