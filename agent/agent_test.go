package agent

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

func TestHeartbeats(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)

	f.waitFor("5 heartbeats", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 5 })
	hbs, _, _ := f.snapshot()
	for _, hb := range hbs {
		if hb.BootedRevision != "rev-1" {
			t.Errorf("heartbeat %+v, want booted_revision rev-1", hb)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.userAgents) != 1 || !f.userAgents["anvil-agent/test"] {
		t.Errorf("user agents = %v", f.userAgents)
	}
}

func TestReportSentOnceThenOnChange(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("inventory/testdata/host")); err != nil {
		t.Fatal(err)
	}
	f := newFakeBoot(t)
	h := newHarness(t, f, func(c *Config) { c.Root = root })
	h.start(t)

	f.waitFor("the first report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })
	// Many more checks with nothing changed must not send another report.
	checks := h.agent.reportChecks.Load()
	f.waitFor("5 more report checks", func() bool { return h.agent.reportChecks.Load() >= checks+5 })
	_, reps, _ := f.snapshot()
	if len(reps) != 1 {
		t.Fatalf("%d reports without a change, want 1", len(reps))
	}
	first := reps[0]
	if first.BootedRevision != "rev-1" || first.Hardware.CPUs != 16 || len(first.Hardware.Disks) != 2 || len(first.Hardware.NICs) != 2 {
		t.Errorf("first report %+v", first)
	}
	if first.RebootRequired.Required || len(first.StartupLog) != 1 {
		t.Errorf("first report reboot_required/startup_log: %+v", first)
	}

	// The OS asks for a reboot.
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "run/reboot-required"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitFor("a second report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 2 })
	_, reps, _ = f.snapshot()
	if rr := reps[1].RebootRequired; !rr.Required || !strings.Contains(rr.Reason, "/run/reboot-required") {
		t.Errorf("second report reboot_required = %+v", rr)
	}

	// A disk disappears.
	if err := os.RemoveAll(filepath.Join(root, "sys/block/nvme1n1")); err != nil {
		t.Fatal(err)
	}
	f.waitFor("a third report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 3 })
	_, reps, _ = f.snapshot()
	if d := reps[2].Hardware.Disks; len(d) != 1 || d[0].Name != "nvme0n1" {
		t.Errorf("third report disks = %+v", d)
	}
}

func TestReportCarriesPendingTarget(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.rebooter.err = errTest("systemctl: connection refused")
	h.start(t)
	f.waitFor("the first report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })

	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("a report with the pending target", func() bool {
		_, reps, _ := f.snapshot()
		last := reps[len(reps)-1]
		return last.RebootRequired.Required && strings.Contains(last.RebootRequired.Reason, "target revision rev-2")
	})
}

func TestRebootInstruction(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("a reboot", func() bool { return len(h.rebooter.calls()) == 1 })
	if acks := f.acksFor("i-1"); len(acks) != 1 || acks[0].Status != api.AckAccepted {
		t.Fatalf("acks before reboot = %v, want [accepted]", statuses(acks))
	}
	if reason := h.rebooter.calls()[0]; !strings.Contains(reason, "i-1") || !strings.Contains(reason, "rev-2") {
		t.Errorf("reboot reason %q names neither instruction nor revision", reason)
	}
	st := readState(t, h.cfg.StateFile)
	if li := st.LastInstruction; li == nil || li.ID != "i-1" || li.Revision != "rev-2" || li.BootID != "boot-1" || li.Outcome != "" {
		t.Errorf("state file = %+v", st.LastInstruction)
	}
}

func TestSameRevisionRebootIsSkipped(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-1"))
	f.waitFor("an ack", func() bool { return len(f.acksFor("i-1")) >= 1 })
	acks := f.acksFor("i-1")
	if acks[0].Status != api.AckSkipped || acks[0].Message != "revision rev-1 already booted" {
		t.Fatalf("ack = %+v, want skipped", acks[0])
	}
	if calls := h.rebooter.calls(); len(calls) != 0 {
		t.Errorf("rebooter called: %v", calls)
	}
}

func TestReapplyRebootsTheSameRevision(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)

	f.push(instruction("i-1", api.KindReapply, "rev-1"))
	f.waitFor("a reboot", func() bool { return len(h.rebooter.calls()) == 1 })
	if acks := f.acksFor("i-1"); statuses(acks) != "[accepted]" {
		t.Errorf("acks = %v", statuses(acks))
	}
}

func TestRedeliveryIsNotExecutedTwice(t *testing.T) {
	f := newFakeBoot(t)
	f.redeliver = true // keeps sending i-1 until it is acked terminally
	stateFile := filepath.Join(t.TempDir(), "state.json")
	h1 := newHarness(t, f, func(c *Config) { c.StateFile = stateFile })
	stop1 := h1.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("i-1 delivered three times", func() bool { return len(f.acksFor("i-1")) >= 3 })
	if calls := h1.rebooter.calls(); len(calls) != 1 {
		t.Fatalf("rebooter called %d times within one run", len(calls))
	}
	for _, a := range f.acksFor("i-1") {
		if a.Status != api.AckAccepted {
			t.Fatalf("redelivery before the reboot acked %v, want accepted", a.Status)
		}
	}
	stop1()

	// "After the reboot": a new agent on the same state file, booted into
	// rev-2 with a new boot id.
	before := len(f.acksFor("i-1"))
	h2 := newHarness(t, f, func(c *Config) {
		c.StateFile = stateFile
		c.BootedRevision = "rev-2"
		c.BootID = "boot-2"
	})
	h2.start(t)
	f.waitFor("i-1 acked done", func() bool {
		acks := f.acksFor("i-1")
		return len(acks) > before && acks[len(acks)-1].Status == api.AckDone
	})
	// A late redelivery is answered "done" again, not executed.
	n := len(f.acksFor("i-1"))
	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("the late redelivery acked", func() bool { return len(f.acksFor("i-1")) > n })
	if acks := f.acksFor("i-1"); acks[len(acks)-1].Status != api.AckDone {
		t.Errorf("late redelivery acked %v", statuses(acks))
	}
	if calls := h2.rebooter.calls(); len(calls) != 0 {
		t.Errorf("rebooter called after the restart: %v", calls)
	}
	if st := readState(t, stateFile); st.LastInstruction.Outcome != api.AckDone {
		t.Errorf("state outcome = %q, want done", st.LastInstruction.Outcome)
	}
}

func TestRestartSettlesThePreviousInstruction(t *testing.T) {
	for _, tc := range []struct {
		name           string
		booted, bootID string
		want           api.AckStatus
		message        string
	}{
		{"rebooted into the target", "rev-2", "boot-2", api.AckDone, "rebooted into revision rev-2"},
		{"rebooted into another revision", "rev-1", "boot-2", api.AckFailed, "booted revision rev-1 instead of rev-2"},
		{"agent restarted without a reboot", "rev-1", "boot-1", api.AckFailed, "did not reboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeBoot(t)
			stateFile := filepath.Join(t.TempDir(), "state.json")
			err := saveState(stateFile, persistedState{LastInstruction: &actedInstruction{
				ID: "i-1", Kind: api.KindReboot, Revision: "rev-2", BootedRevision: "rev-1", BootID: "boot-1",
			}})
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, f, func(c *Config) {
				c.StateFile, c.BootedRevision, c.BootID = stateFile, tc.booted, tc.bootID
			})
			h.start(t)
			f.waitFor("an ack", func() bool { return len(f.acksFor("i-1")) >= 1 })
			ack := f.acksFor("i-1")[0]
			if ack.Status != tc.want || !strings.Contains(ack.Message, tc.message) {
				t.Errorf("ack = %+v, want %s containing %q", ack, tc.want, tc.message)
			}
			// Redelivered, it is not executed, whatever the outcome was.
			f.push(instruction("i-1", api.KindReboot, "rev-2"))
			f.waitFor("the redelivery acked", func() bool { return len(f.acksFor("i-1")) >= 2 })
			if calls := h.rebooter.calls(); len(calls) != 0 {
				t.Errorf("rebooter called: %v", calls)
			}
		})
	}
}

func TestAuthFailureThenRecovery(t *testing.T) {
	f := newFakeBoot(t)
	f.rejectAuth = 6
	h := newHarness(t, f)
	h.start(t)

	f.waitFor("a heartbeat after the credential is accepted again", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 1 })
	f.waitFor("a report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })
	if !strings.Contains(h.logs.String(), "rejected the agent credential") {
		t.Errorf("the logs do not say the credential was rejected")
	}
	// The harness also checks that the credential never reached the logs.
}

func TestServerErrorsAreRetried(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := newFakeBoot(t)
			f.failWith = status
			f.failures = map[string]int{"heartbeat": 4, "report": 3, "instructions": 3, "ack": 2}
			h := newHarness(t, f)
			h.start(t)
			f.push(instruction("i-1", api.KindReboot, "rev-2"))

			f.waitFor("a heartbeat", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 1 })
			f.waitFor("a report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })
			f.waitFor("a reboot", func() bool { return len(h.rebooter.calls()) == 1 })
			for op, min := range map[string]int{"heartbeat": 5, "report": 4, "ack": 3} {
				if n := f.requestCount(op); n < min {
					t.Errorf("%s: %d requests, want at least %d", op, n, min)
				}
			}
			if !strings.Contains(h.logs.String(), "will retry") && !strings.Contains(h.logs.String(), "rate limiting") {
				t.Errorf("the failures were not logged")
			}
		})
	}
}

func TestMalformedInstructions(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)

	f.pushRaw(
		`<html>502 Bad Gateway</html>`,
		`{"instructions":[
			{"id":"i-bad","kind":"format-disks","revision":"rev-2"},
			{"kind":"reboot","revision":"rev-2"},
			{"id":"i-norev","kind":"reboot"},
			{"id":"i-good","kind":"reboot","revision":"rev-2"}
		]}`,
	)
	f.waitFor("a reboot for the good instruction", func() bool { return len(h.rebooter.calls()) == 1 })
	for id, reason := range map[string]string{"i-bad": `unknown instruction kind "format-disks"`, "i-norev": "missing revision"} {
		acks := f.acksFor(id)
		if len(acks) != 1 || acks[0].Status != api.AckFailed || !strings.Contains(acks[0].Message, reason) {
			t.Errorf("%s acks = %+v, want one failed with %q", id, acks, reason)
		}
	}
	if acks := f.acksFor("i-good"); statuses(acks) != "[accepted]" {
		t.Errorf("i-good acks = %v", statuses(acks))
	}
	logs := h.logs.String()
	for _, want := range []string{"malformed instructions response", "without a usable id"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs do not mention %q", want)
		}
	}
}

func TestRefusedAcceptDoesNotReboot(t *testing.T) {
	f := newFakeBoot(t)
	f.refuseAccept = true
	h := newHarness(t, f)
	h.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-2"), instruction("i-2", api.KindReboot, "rev-1"))
	// i-2 is handled after i-1, so its ack proves i-1 is finished with.
	f.waitFor("i-2 acked", func() bool { return len(f.acksFor("i-2")) >= 1 })
	if calls := h.rebooter.calls(); len(calls) != 0 {
		t.Errorf("rebooted although the server refused the acceptance: %v", calls)
	}
	if _, err := os.Stat(h.cfg.StateFile); err == nil {
		t.Errorf("state file written for an instruction that was not acted on")
	}
}

func TestRebootFailureIsAckedFailed(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.rebooter.err = errTest("exit status 1: Failed to reboot system via logind")
	h.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("two acks", func() bool { return len(f.acksFor("i-1")) >= 2 })
	acks := f.acksFor("i-1")
	if statuses(acks) != "[accepted failed]" || !strings.Contains(acks[1].Message, "logind") {
		t.Errorf("acks = %+v", acks)
	}
	if st := readState(t, h.cfg.StateFile); st.LastInstruction.Outcome != api.AckFailed {
		t.Errorf("state outcome = %q", st.LastInstruction.Outcome)
	}
}

func TestUnwritableStateRefusesToReboot(t *testing.T) {
	f := newFakeBoot(t)
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, f, func(c *Config) { c.StateFile = filepath.Join(blocker, "state.json") })
	h.start(t)

	f.push(instruction("i-1", api.KindReboot, "rev-2"))
	f.waitFor("two acks", func() bool { return len(f.acksFor("i-1")) >= 2 })
	if acks := f.acksFor("i-1"); statuses(acks) != "[accepted failed]" || !strings.Contains(acks[1].Message, "persist") {
		t.Errorf("acks = %+v", acks)
	}
	if calls := h.rebooter.calls(); len(calls) != 0 {
		t.Errorf("rebooted without persisted state: %v", calls)
	}
}

func TestCorruptStateFileDoesNotStopTheAgent(t *testing.T) {
	f := newFakeBoot(t)
	stateFile := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(stateFile, []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, f, func(c *Config) { c.StateFile = stateFile })
	h.start(t)
	f.waitFor("a heartbeat", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 1 })
	if !strings.Contains(h.logs.String(), "cannot read state file") {
		t.Error("the corrupt state file was not logged")
	}
}

func TestManyAgentsInOneProcess(t *testing.T) {
	// What a simulator does: several agents, separate state, one shared
	// HTTP client, no globals.
	f := newFakeBoot(t)
	var stops []func()
	for i := range 5 {
		h := newHarness(t, f, func(c *Config) {
			c.HTTPClient = http.DefaultClient
			c.BootID = "boot-" + string(rune('a'+i))
		})
		stops = append(stops, h.start(t))
	}
	f.waitFor("heartbeats from all", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 25 })
	for _, stop := range stops {
		stop()
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }

func TestUnknownMachineKeepsTrying(t *testing.T) {
	f := newFakeBoot(t)
	f.uuid = "00000000-0000-0000-0000-000000000000" // the server does not know ours yet
	h := newHarness(t, f)
	h.start(t)

	f.waitFor("repeated heartbeat attempts", func() bool { return f.requestCount("heartbeat") >= 3 })
	if !strings.Contains(h.logs.String(), "does not know this machine") {
		t.Error("the logs do not say the machine is unknown")
	}
	f.set(func(f *fakeBoot) { f.uuid = testUUID }) // e.g. an operator pre-registers it
	f.waitFor("a heartbeat", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 1 })
}

// The reboot indicator is checked between reports: with a report interval
// of an hour, the OS asking for a reboot is still reported at once.
func TestRebootIndicatorReportedBetweenReports(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("inventory/testdata/host")); err != nil {
		t.Fatal(err)
	}
	f := newFakeBoot(t)
	h := newHarness(t, f, func(c *Config) {
		c.Root = root
		c.ReportInterval = time.Hour
		c.RebootCheck = 10 * time.Millisecond
	})
	h.start(t)
	f.waitFor("the first report", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 1 })
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "run/reboot-required"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitFor("a report of the reboot indicator", func() bool { _, reps, _ := f.snapshot(); return len(reps) >= 2 })
	_, reps, _ := f.snapshot()
	if rr := reps[1].RebootRequired; !rr.Required || !strings.Contains(rr.Reason, "/run/reboot-required") {
		t.Errorf("second report reboot_required = %+v", rr)
	}
}

// TestFirstHeartbeatFollowsFirstReport: at start the agent reports before
// it heartbeats (both carry the booted revision, which the boot service
// passes on once); a first report that is never sent (its journal read
// hangs) holds the heartbeats back for one request timeout at most.
func TestFirstHeartbeatFollowsFirstReport(t *testing.T) {
	f := newFakeBoot(t)
	h := newHarness(t, f)
	h.start(t)
	f.waitFor("a heartbeat", func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 1 })
	f.mu.Lock()
	first := slices.IndexFunc(f.arrived, func(op string) bool { return op == "heartbeat" || op == "report" })
	arrived := slices.Clone(f.arrived)
	f.mu.Unlock()
	if first < 0 || arrived[first] != "report" {
		t.Fatalf("requests in arrival order %v: the first report must come before the first heartbeat", arrived)
	}

	hung := newFakeBoot(t)
	journalHangs := make(chan struct{})
	defer close(journalHangs)
	h = newHarness(t, hung, func(c *Config) {
		c.RequestTimeout = 300 * time.Millisecond
		c.Journal = JournalFunc(func(ctx context.Context, _ int) ([]string, error) {
			select {
			case <-journalHangs:
			case <-ctx.Done():
			}
			return nil, nil
		})
	})
	h.start(t)
	hung.waitFor("heartbeats while the first report is still being made", func() bool { hbs, _, _ := hung.snapshot(); return len(hbs) >= 2 })
	if n := hung.requestCount("report"); n != 0 {
		t.Fatalf("%d report requests, want none: the journal read never ends", n)
	}
}
