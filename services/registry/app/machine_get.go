package app

import (
	"context"
	"encoding/json"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// GetMachine reads a machine from the projection, or, with At, rebuilds it
// from the log as it was at that sequence or instant.
func (a *App) GetMachine(ctx context.Context, r api.MachineGet) (api.MachineReply, error) {
	uuid, err := a.machineRef(r.Org, r.UUID)
	if err != nil {
		return api.MachineReply{}, err
	}
	var at events.Position // the zero position: now
	if r.At == "" {
		if a.caughtUp(ctx, r.MinVersion) {
			m, err := a.Machines.Model().Get(r.Org, uuid)
			if err != nil {
				return api.MachineReply{}, err
			}
			return api.MachineReply{Machine: view(m), Version: m.Version}, nil
		}
		// The projection stays behind the caller's own write: the log has it.
	} else if at, err = events.ParseAt(r.At); err != nil {
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
		if r.At == "" {
			return api.MachineReply{}, errs.NotFound("machine %s does not exist in organization %s", uuid, r.Org)
		}
		return api.MachineReply{}, errs.NotFound("machine %s did not exist at %s", uuid, r.At)
	}
	m := wire.Machine(r.Org, s)
	m.CreatedAt, m.UpdatedAt = created.Time, updated.Time
	return api.MachineReply{Machine: m, Version: version}, nil
}

// GetMachineJSON is GetMachine answered, for the machine as it is now,
// with the read model's encoding (the same JSON, without encoding the
// machine again), appended to dst (see command.HandleAppend); a machine as
// it was is rebuilt and encoded as before.
func (a *App) GetMachineJSON(ctx context.Context, r api.MachineGet, dst []byte) ([]byte, error) {
	if r.At != "" || !a.caughtUp(ctx, r.MinVersion) {
		rep, err := a.GetMachine(ctx, r)
		if err != nil {
			return dst, err
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return dst, errs.Internal("encoding machine %s: %v", rep.Machine.UUID, err)
		}
		return append(dst, b...), nil
	}
	uuid, err := a.machineRef(r.Org, r.UUID)
	if err != nil {
		return dst, err
	}
	return a.Machines.Model().AppendGetJSON(dst, r.Org, uuid)
}

// readYourWritesWait bounds how long a read waits for the projection to
// apply the caller's own write.
const readYourWritesWait = 3 * time.Second

// caughtUp waits (at most readYourWritesWait) until the machines'
// projection applied stream sequence min, and reports whether it did.
func (a *App) caughtUp(ctx context.Context, min uint64) bool {
	if min == 0 || a.WaitMachines == nil || a.Machines.Model().Checkpoint() >= min {
		return true // the gateway's read cache asks every miss for a position the model usually has
	}
	ctx, cancel := context.WithTimeout(ctx, readYourWritesWait)
	defer cancel()
	return a.WaitMachines(ctx, min) == nil
}
