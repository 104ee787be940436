package app

import (
	"context"
	"time"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	"github.com/anvil-fleet/anvil/services/boot/domain/report"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Heartbeat handles POST /agent/v1/machines/{uuid}/heartbeat: the registry
// stores the last-seen time (not an event), and a booted revision that
// differs from the one reported before is translated and reported.
func (a *App) Heartbeat(ctx context.Context, ag Agent, hb agentapi.Heartbeat) error {
	agentRequests.WithLabelValues("heartbeat").Inc()
	if err := report.BootedRevision(hb.BootedRevision); err != nil {
		return errs.Invalid("booted_revision", "%v", err)
	}
	now := a.Now()
	if err := a.Registry.Heartbeat(ctx, ag.Org, ag.UUID, now); err != nil {
		return err
	}
	_, err := a.observeBooted(ctx, ag, hb.BootedRevision, now)
	return err
}

// observeBooted records the machine revision the agent runs: it settles the
// instructions that this answers and, once per revision, reports the pool
// revision it stands for to the registry (the registry counts revisions by
// pool revision number, the agent knows the machine revision id). It
// returns a problem (not an error) when the revision cannot be translated.
func (a *App) observeBooted(ctx context.Context, ag Agent, mrid string, now time.Time) (problem string, err error) {
	rec, err := a.update(ctx, ag.Record, func(r *record.Record) (bool, error) { return r.ObserveBooted(mrid, now), nil })
	if err != nil {
		return "", asUnavailable(err, "the boot records")
	}
	if mrid == "" {
		return "the agent reported no booted revision (its /etc/anvil/revision is missing)", nil
	}
	if rec.BootedRevision != mrid || rec.ReportedRevision != 0 {
		return "", nil
	}
	served, ok := rec.ServedRevision(mrid)
	if !ok {
		recordFailures.WithLabelValues("booted_revision_unknown").Inc()
		a.Log.WarnContext(ctx, "the agent reports a machine revision this boot service never served", "org", ag.Org, "uuid", ag.UUID, "booted_revision", mrid)
		return "booted revision " + mrid + " was not served to this machine by the boot service; it is not recorded", nil
	}
	if err := a.Registry.Command(ctx, ag.Org, ag.UUID, regapi.ReportBootedRevision{Revision: served.Revision, At: now}); err != nil {
		if unavailable(err) {
			return "", err
		}
		recordFailures.WithLabelValues("booted_revision").Inc()
		a.Log.WarnContext(ctx, "booted revision not recorded", "org", ag.Org, "uuid", ag.UUID, "revision", served.Revision, "err", err)
		return "booted revision " + mrid + " was not recorded: " + err.Error(), nil
	}
	a.Log.InfoContext(ctx, "machine booted its revision", "org", ag.Org, "uuid", ag.UUID, "machine_revision", mrid, "pool", served.Pool, "revision", served.Revision)
	_, err = a.update(ctx, rec, func(r *record.Record) (bool, error) {
		if r.BootedRevision != mrid {
			return false, nil // a newer report won the race
		}
		return r.MarkReported(served.Revision), nil
	})
	return "", err
}
