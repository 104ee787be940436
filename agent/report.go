package agent

import (
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/agent/inventory"
)

// maxLogLine bounds one startup-log line, so a binary blob in the journal
// cannot blow up the report.
const maxLogLine = 2048

// reportLoop sends a report at start and again whenever the hardware or the
// reboot indicator changes. The startup log alone changing is not a reason:
// it changes all the time. It calls attempted once the first report was
// answered or failed.
func (a *Agent) reportLoop(ctx context.Context, attempted func()) {
	defer attempted()
	bo := a.newBackoff()
	var lastSent, lastInvErr string
	var lastReboot api.RebootRequired // in the last report sent
	failures := 0
	rebootCheck := time.NewTicker(a.cfg.RebootCheck)
	defer rebootCheck.Stop()
	for {
		hw, err := inventory.Read(a.cfg.Root)
		if msg := errString(err); msg != lastInvErr {
			if err != nil {
				a.log.Warn("hardware inventory incomplete", "error", msg)
			}
			lastInvErr = msg
		}
		reboot := a.rebootRequired()
		fp := fingerprint(hw, reboot)

		delay := jitter(a.cfg.ReportInterval, cadenceJitter)
		if fp != lastSent {
			r := api.Report{
				BootedRevision: a.cfg.BootedRevision,
				Hardware:       hw,
				RebootRequired: reboot,
				StartupLog:     a.startupLog(ctx),
			}
			rctx, cancel := a.requestContext(ctx, 0)
			err := a.client.Report(rctx, r)
			cancel()
			attempted()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failures++
				delay = retryDelay(err, bo)
				a.logCallFailure(a.log, "report", err, failures, delay)
			} else {
				why := "changed"
				if lastSent == "" {
					why = "initial"
				}
				a.log.Info("report sent", "why", why,
					"cpus", hw.CPUs, "memory_bytes", hw.MemoryBytes, "disks", len(hw.Disks), "nics", len(hw.NICs),
					"reboot_required", reboot.Required, "reboot_reason", reboot.Reason, "startup_log_lines", len(r.StartupLog))
				lastSent, lastReboot = fp, reboot
				failures = 0
				bo.reset()
			}
		}

		a.reportChecks.Add(1)
		wait := time.NewTimer(delay)
	waiting:
		for {
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case <-a.reportNudge:
				break waiting
			case <-wait.C:
				break waiting
			case <-rebootCheck.C:
				// The indicator is a stat away; the inventory is not. A
				// change of the indicator is reported now rather than at
				// the next report interval.
				if lastSent != "" && a.rebootRequired() != lastReboot {
					break waiting
				}
			}
		}
		wait.Stop()
	}
}

// rebootRequired combines the OS's indicator with what the boot service told
// the agent: a pending target revision that is not booted needs a reboot too.
func (a *Agent) rebootRequired() api.RebootRequired {
	var reasons []string
	req, reason, err := inventory.RebootRequired(a.cfg.Root)
	if err != nil {
		a.log.Warn("cannot read the reboot indicator", "error", err.Error())
	}
	if req {
		reasons = append(reasons, reason)
	}
	if target := a.getPendingTarget(); target != "" {
		reasons = append(reasons, "target revision "+target+" differs from booted revision "+orUnknown(a.cfg.BootedRevision))
	}
	return api.RebootRequired{Required: len(reasons) > 0, Reason: strings.Join(reasons, "; ")}
}

func (a *Agent) startupLog(ctx context.Context) []string {
	lines, err := a.cfg.Journal.Tail(ctx, a.cfg.JournalLines)
	if err != nil {
		// Not fatal: a report without logs still carries the inventory.
		a.log.Warn("cannot read the startup log", "error", err.Error())
	}
	if len(lines) > a.cfg.JournalLines {
		lines = lines[len(lines)-a.cfg.JournalLines:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = truncateUTF8(l, maxLogLine)
	}
	return out
}

func fingerprint(hw api.Hardware, r api.RebootRequired) string {
	b, _ := json.Marshal(struct {
		H api.Hardware
		R api.RebootRequired
	}{hw, r})
	return string(b)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
