package app

import (
	"context"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/report"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Report handles POST /agent/v1/machines/{uuid}/report: the hardware, the
// reboot indicator and the booted revision go to the registry (each appends
// an event only when it changed), the startup log to the startup-log store.
//
// A report is taken even when parts of it cannot be recorded (an incomplete
// inventory, an unknown revision): refusing it would make the agent resend
// the same report forever and hide the machine's startup log, which is how
// an operator finds out what is wrong. What was not recorded is listed in
// the stored startup log's Problems. Only a dependency being down (503, the
// agent retries) or a deleted machine (404) fails the request.
func (a *App) Report(ctx context.Context, ag Agent, rep agentapi.Report) error {
	agentRequests.WithLabelValues("report").Inc()
	if err := report.BootedRevision(rep.BootedRevision); err != nil {
		return errs.Invalid("booted_revision", "%v", err)
	}
	now := a.Now()
	var problems []string
	fail := func(what string, err error) error {
		if unavailable(err) || errs.Is(err, errs.KindNotFound) {
			return err
		}
		recordFailures.WithLabelValues(what).Inc()
		problems = append(problems, what+" not recorded: "+err.Error())
		a.Log.WarnContext(ctx, "part of an agent report not recorded", "org", ag.Org, "uuid", ag.UUID, "what", what, "err", err)
		return nil
	}

	if hw, err := report.Hardware(rep.Hardware); err != nil {
		problems = append(problems, "hardware not recorded: "+err.Error())
	} else if err := a.Registry.Command(ctx, ag.Org, ag.UUID, regapi.ReportHardware{Hardware: hw, At: now}); err != nil {
		if err := fail("hardware", err); err != nil {
			return err
		}
	}
	if err := a.Registry.Command(ctx, ag.Org, ag.UUID, regapi.ReportRebootRequired{
		Required: rep.RebootRequired.Required, Reason: report.RebootReason(rep.RebootRequired),
	}); err != nil {
		if err := fail("reboot_required", err); err != nil {
			return err
		}
	}
	problem, err := a.observeBooted(ctx, ag, rep.BootedRevision, now)
	if err != nil {
		return err
	}
	if problem != "" {
		problems = append(problems, problem)
	}
	return a.StartupLogs.Put(ctx, api.StartupLog{
		Org: ag.Org, UUID: ag.UUID, BootedRevision: rep.BootedRevision, ReportedAt: now,
		Lines: report.StartupLog(rep.StartupLog), Problems: problems,
	})
}
