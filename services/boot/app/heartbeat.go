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
	b, err := a.settleBooted(ctx, ag, mrid, now)
	if err != nil || b.report == nil {
		return b.problem, err
	}
	if err := a.Registry.Command(ctx, ag.Org, ag.UUID, *b.report); err != nil {
		return a.bootedNotRecorded(ctx, ag, b, err)
	}
	return "", a.bootedReported(ctx, ag, b)
}

// booted is what a heartbeat or a report says of the machine revision the
// agent runs, once the boot record took it.
type booted struct {
	rec  record.Record
	mrid string
	// report is the registry command that reports the pool revision the
	// machine revision stands for; nil when it was reported before, or
	// cannot be (problem says why).
	report  *regapi.ReportBootedRevision
	pool    string
	problem string
}

// settleBooted records the machine revision the agent runs in the boot
// record, which settles the instructions it answers, and translates it
// into the registry's command when it is not reported yet.
func (a *App) settleBooted(ctx context.Context, ag Agent, mrid string, now time.Time) (booted, error) {
	rec, err := a.update(ctx, ag.Record, func(r *record.Record) (bool, error) { return r.ObserveBooted(mrid, now), nil })
	if err != nil {
		return booted{}, asUnavailable(err, "the boot records")
	}
	b := booted{rec: rec, mrid: mrid}
	if mrid == "" {
		b.problem = "the agent reported no booted revision (its /etc/anvil/revision is missing)"
		return b, nil
	}
	if rec.BootedRevision != mrid || rec.ReportedRevision != 0 {
		return b, nil
	}
	served, ok := rec.ServedRevision(mrid)
	if !ok {
		recordFailures.WithLabelValues("booted_revision_unknown").Inc()
		a.Log.WarnContext(ctx, "the agent reports a machine revision this boot service never served", "org", ag.Org, "uuid", ag.UUID, "booted_revision", mrid)
		b.problem = "booted revision " + mrid + " was not served to this machine by the boot service; it is not recorded"
		return b, nil
	}
	b.report, b.pool = &regapi.ReportBootedRevision{Revision: served.Revision, At: now}, served.Pool
	return b, nil
}

// bootedNotRecorded is the answer to the registry's refusal of b's
// report: the error when the registry is down (the agent sends it again),
// otherwise a problem for the startup log.
func (a *App) bootedNotRecorded(ctx context.Context, ag Agent, b booted, err error) (problem string, _ error) {
	if unavailable(err) {
		return "", err
	}
	recordFailures.WithLabelValues("booted_revision").Inc()
	a.Log.WarnContext(ctx, "booted revision not recorded", "org", ag.Org, "uuid", ag.UUID, "revision", b.report.Revision, "err", err)
	return "booted revision " + b.mrid + " was not recorded: " + err.Error(), nil
}

// bootedReported notes in the boot record that the registry took b's
// report, so that it is sent once per revision.
func (a *App) bootedReported(ctx context.Context, ag Agent, b booted) error {
	a.Log.InfoContext(ctx, "machine booted its revision", "org", ag.Org, "uuid", ag.UUID, "machine_revision", b.mrid, "pool", b.pool, "revision", b.report.Revision)
	_, err := a.update(ctx, b.rec, func(r *record.Record) (bool, error) {
		if r.BootedRevision != b.mrid {
			return false, nil // a newer report won the race
		}
		return r.MarkReported(b.report.Revision), nil
	})
	return err
}
