package app

import (
	"context"
	"log/slog"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// SweepConnectivity marks machines offline whose agent has been silent for
// longer than OfflineAfter. Every replica may sweep: the command is
// idempotent and the append optimistic, so one transition is recorded.
func (a *App) SweepConnectivity(ctx context.Context, log *slog.Logger) (offline int) {
	now := a.Now()
	model := a.Machines.Model()
	for _, o := range a.Orgs.List() {
		cursor := ""
		for {
			page, err := model.List(o.State.ID, readmodel.Filter{Cursor: cursor, Limit: 1000})
			if err != nil {
				log.Error("connectivity sweep", "org", o.State.ID, "err", err)
				break
			}
			for _, m := range page.Items {
				if _, due := machine.ConnectivityTransition(m.State, m.LastSeen, a.OfflineAfter, now); !due || m.Connectivity != machine.Online {
					continue
				}
				_, err := a.MachineCommand(ctx, o.State.ID, m.UUID, 0, machine.CheckConnectivity{LastHeartbeat: m.LastSeen, Silence: a.OfflineAfter})
				if err != nil && !errs.Is(err, errs.KindConflict) {
					log.Warn("marking machine offline", "org", o.State.ID, "uuid", m.UUID, "err", err)
					continue
				}
				offline++
			}
			if page.Next == "" || ctx.Err() != nil {
				break
			}
			cursor = page.Next
		}
	}
	return offline
}
