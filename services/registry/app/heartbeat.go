package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// Heartbeat stores the last-seen time, which is not an event. Only when it
// brings an offline machine back does it append one (machine.came_online).
func (a *App) Heartbeat(ctx context.Context, r api.Heartbeat) error {
	uuid, err := a.machineRef(r.Org, r.UUID)
	if err != nil {
		return err
	}
	m, err := a.Machines.Model().Get(r.Org, uuid)
	if err != nil {
		return err
	}
	at := r.At
	if at.IsZero() || at.After(a.Now()) {
		at = a.Now() // a machine's clock does not decide what "now" is
	}
	if err := a.Heartbeats.Record(ctx, r.Org, uuid, at); err != nil {
		return err
	}
	a.Machines.Model().SetLastSeen(r.Org, uuid, at)
	if m.Connectivity != machine.Online {
		_, err := a.MachineCommand(ctx, r.Org, uuid, 0, machine.CheckConnectivity{LastHeartbeat: at, Silence: a.OfflineAfter})
		return err
	}
	return nil
}
