package app

import (
	"context"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/report"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Report handles POST /agent/v1/machines/{uuid}/report: the hardware, the
// reboot indicator and the booted revision go to the registry (each appends
// an event only when it changed), the startup log to the startup-log store.
//
// The boot record takes the booted revision first, which settles the
// reboot the machine was told to make: a rollout waits for that, not for
// the inventory. The registry then gets the report's three parts in one
// command (ReportAgent), which it takes whole or not at all.
//
// A report is taken even when parts of it cannot be recorded (an
// incomplete inventory, an unknown revision): refusing it would make the
// agent resend the same report forever and hide the machine's startup log,
// which is how an operator finds out what is wrong. What was not recorded
// is listed in the stored startup log's Problems; when the registry
// refuses the report as a whole, or serves no whole report yet, its parts
// are sent one by one. Only a dependency being down (503, the agent
// retries) or a deleted machine (404) fails the request.
func (a *App) Report(ctx context.Context, ag Agent, rep agentapi.Report) error {
	agentRequests.WithLabelValues("report").Inc()
	if err := report.BootedRevision(rep.BootedRevision); err != nil {
		return errs.Invalid("booted_revision", "%v", err)
	}
	now := a.Now()
	var problems []string
	b, err := a.settleBooted(ctx, ag, rep.BootedRevision, now)
	if err != nil {
		return err
	}
	if b.problem != "" {
		problems = append(problems, b.problem)
	}
	var hardware *regapi.ReportHardware
	if hw, err := report.Hardware(rep.Hardware); err != nil {
		problems = append(problems, "hardware not recorded: "+err.Error())
	} else {
		hardware = &regapi.ReportHardware{Hardware: hw, At: now}
	}
	rebootRequired := &regapi.ReportRebootRequired{Required: rep.RebootRequired.Required, Reason: report.RebootReason(rep.RebootRequired)}

	err = a.Registry.Command(ctx, ag.Org, ag.UUID, regapi.ReportAgent{Hardware: hardware, RebootRequired: rebootRequired, BootedRevision: b.report})
	switch {
	case err == nil:
		if b.report != nil {
			if err := a.bootedReported(ctx, ag, b); err != nil {
				return err
			}
		}
	case !partByPart(err):
		return err
	default:
		a.Log.InfoContext(ctx, "the registry did not take an agent report as a whole; its parts go one by one", "org", ag.Org, "uuid", ag.UUID, "err", err)
		more, err := a.reportPartByPart(ctx, ag, hardware, rebootRequired, b)
		if err != nil {
			return err
		}
		problems = append(problems, more...)
	}
	return a.StartupLogs.Put(ctx, api.StartupLog{
		Org: ag.Org, UUID: ag.UUID, BootedRevision: rep.BootedRevision, ReportedAt: now,
		Lines: report.StartupLog(rep.StartupLog), Problems: problems,
	})
}

// partByPart reports whether the registry's answer to a whole report
// means its parts go one by one: it refused the report (a part it does not
// take), or no registry serves the whole report yet (one older than this
// boot service, during an upgrade). A registry that is down or a machine
// that is gone fails the report instead.
func partByPart(err error) bool {
	return command.IsNoResponder(err) || !(unavailable(err) || errs.Is(err, errs.KindNotFound))
}

// reportPartByPart sends a report's parts as their own commands, so that
// the registry records every part it takes, and returns what it refused
// as problems.
func (a *App) reportPartByPart(ctx context.Context, ag Agent, hardware *regapi.ReportHardware, rebootRequired *regapi.ReportRebootRequired, b booted) ([]string, error) {
	var problems []string
	fail := func(what string, err error) error {
		if err == nil || unavailable(err) || errs.Is(err, errs.KindNotFound) {
			return err
		}
		recordFailures.WithLabelValues(what).Inc()
		problems = append(problems, what+" not recorded: "+err.Error())
		a.Log.WarnContext(ctx, "part of an agent report not recorded", "org", ag.Org, "uuid", ag.UUID, "what", what, "err", err)
		return nil
	}
	if hardware != nil {
		if err := fail("hardware", a.Registry.Command(ctx, ag.Org, ag.UUID, *hardware)); err != nil {
			return nil, err
		}
	}
	if err := fail("reboot_required", a.Registry.Command(ctx, ag.Org, ag.UUID, *rebootRequired)); err != nil {
		return nil, err
	}
	if b.report == nil {
		return problems, nil
	}
	if err := a.Registry.Command(ctx, ag.Org, ag.UUID, *b.report); err != nil {
		problem, err := a.bootedNotRecorded(ctx, ag, b, err)
		if err != nil {
			return nil, err
		}
		return append(problems, problem), nil
	}
	return problems, a.bootedReported(ctx, ag, b)
}
