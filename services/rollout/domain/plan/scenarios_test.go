package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

func (d *driver) view() operation.View { return operation.Project(d.events) }

func (d *driver) machine(i int) *rollout.MachineState {
	m, ok := d.state.Machine(uuidOf(i))
	if !ok {
		d.t.Fatalf("no machine %d", i)
	}
	return m
}

func (d *driver) logHas(substr string) bool {
	for _, e := range d.view().Log {
		if strings.Contains(e.String(), substr) {
			return true
		}
	}
	return false
}

func eventsOf[T any](evs []any) []T {
	var out []T
	for _, e := range evs {
		if x, ok := e.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func instructionsFor(w *world, uuid string) []string {
	var ids []string
	for _, in := range w.instructions {
		if in.uuid == uuid {
			ids = append(ids, in.id)
		}
	}
	return ids
}

func TestDrainBlockedByPDBThenSucceeds(t *testing.T) {
	w := newWorld(3, 1)
	w.nodes[uuidOf(1)].pdbBlockTicks = 4
	d := newDriver(t, w, startCmd("r1", machines(3), "1"))
	d.run(300)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatalf("status %s: %s", d.state.Status(), d.state.Reason)
	}
	blocks := eventsOf[rollout.DrainBlocked](d.events)
	if len(blocks) < 3 {
		t.Fatalf("drain blocks logged: %d", len(blocks))
	}
	for i, b := range blocks {
		if b.Machine != uuidOf(1) || b.Block.Pod != "shop/cart-0" || b.Block.Budget != "shop/cart" {
			t.Errorf("block %+v", b)
		}
		if i > 0 && b.Block.WaitedFor <= blocks[i-1].Block.WaitedFor {
			t.Errorf("waited-for does not grow: %v", blocks)
		}
	}
	if !d.logHas("m01 drain blocked: pod shop/cart-0 cannot be evicted: PodDisruptionBudget shop/cart refuses it; waited 2m0s so far") {
		t.Errorf("the log does not name pod, budget and wait:\n%v", d.view().Log)
	}
}

func TestDrainBlockedForEverTimesOutThenRetry(t *testing.T) {
	w := newWorld(6, 1)
	w.nodes[uuidOf(2)].pdbBlockTicks = -1
	d := newDriver(t, w, startCmd("r1", machines(6), "2"))
	d.run(300)
	if st := d.state.Status(); st != rollout.StatusFailed {
		t.Fatalf("status %s", st)
	}
	m2 := d.machine(2)
	if m2.Phase != rollout.PhaseFailed || m2.Failure.Step != rollout.StepDrain || !m2.Failure.TimedOut {
		t.Fatalf("m02: %+v", m2)
	}
	want := "drain timed out after 15m0s; pod shop/cart-0 was blocked by PodDisruptionBudget shop/cart"
	if !strings.Contains(m2.Failure.Reason, want) {
		t.Errorf("reason %q lacks %q", m2.Failure.Reason, want)
	}
	// While m02 drained, m01, m03 and m04 took the other slot in turn;
	// m04 was in flight when m02 failed and finished; nothing began after
	// the failure.
	failedAt := eventsOf[rollout.StepFailed](d.events)[0].At
	for _, b := range eventsOf[rollout.MachineBegun](d.events) {
		if b.At.After(failedAt) {
			t.Errorf("%s began after the failure", b.Machine)
		}
	}
	for i, want := range []rollout.Phase{rollout.PhaseDone, rollout.PhaseFailed, rollout.PhaseDone, rollout.PhaseDone, rollout.PhaseWaiting, rollout.PhaseWaiting} {
		if got := d.machine(i + 1).Phase; got != want {
			t.Errorf("m%02d: %s, want %s", i+1, got, want)
		}
	}
	if !w.nodes[uuidOf(2)].cordoned {
		t.Fatal("the failed machine must stay cordoned")
	}
	f := eventsOf[rollout.Failed](d.events)
	if len(f) != 1 || f[0].Machines[1].Outcome != rollout.OutcomeFailed || f[0].Machines[1].Node != rollout.NodeCordoned ||
		f[0].Machines[4].Outcome != rollout.OutcomeNotStarted {
		t.Fatalf("failed event: %+v", f)
	}
	if !d.logHas("m02 drain final_state: failed at drain: drain timed out") || !d.logHas("its node is LEFT CORDONED") {
		t.Errorf("the log must say the node is left cordoned:\n%v", d.view().Log)
	}

	// The budget frees up; Retry resumes at the drain.
	w.nodes[uuidOf(2)].pdbBlockTicks = 0
	if !d.decide(rollout.Retry{By: "token:t1 (ops)"}) {
		t.Fatal("retry refused")
	}
	d.run(300)
	if st := d.state.Status(); st != rollout.StatusSucceeded {
		t.Fatalf("after retry: %s", st)
	}
	var m2steps []string
	for _, l := range d.trace {
		if strings.HasPrefix(l, "m02 ") {
			m2steps = append(m2steps, strings.TrimPrefix(l, "m02 "))
		}
	}
	want2 := []string{"cordon#1", "drain#1", "drain failed", "drain#2", "reboot#1", "wait_boot#1", "wait_ready#1", "uncordon#1"}
	if !slices.Equal(m2steps, want2) {
		t.Errorf("m02 steps %v, want %v", m2steps, want2)
	}
}

func TestAgentNeverReportsThenRetry(t *testing.T) {
	w := newWorld(3, 1)
	w.nodes[uuidOf(1)].neverReports = true
	d := newDriver(t, w, startCmd("r1", machines(3), "1"))
	d.run(400)
	if st := d.state.Status(); st != rollout.StatusFailed {
		t.Fatalf("status %s", st)
	}
	m1 := d.machine(1)
	if m1.Failure == nil || m1.Failure.Step != rollout.StepWaitBoot || !m1.Failure.TimedOut || !strings.Contains(m1.Failure.Reason, "wait_boot timed out after 2h0m0s") {
		t.Fatalf("m01: %+v %+v", m1, m1.Failure)
	}
	// The rollout stopped taking machines.
	if d.machine(2).Phase != rollout.PhaseWaiting {
		t.Fatal("m02 began after m01 failed")
	}
	// The machine is fixed; Retry resumes at wait_boot and sends no
	// second reboot.
	w.nodes[uuidOf(1)].neverReports = false
	d.decide(rollout.Retry{})
	d.run(400)
	if st := d.state.Status(); st != rollout.StatusSucceeded {
		t.Fatalf("after retry: %s", st)
	}
	if ids := instructionsFor(w, uuidOf(1)); len(ids) != 1 || len(w.reboots[uuidOf(1)]) != 1 {
		t.Fatalf("m01 instructions %v reboots %v", ids, w.reboots[uuidOf(1)])
	}
	if m := d.machine(1); m.Step != rollout.StepUncordon || !m.Ready {
		t.Fatalf("%+v", m)
	}
	if !slices.Contains(d.trace, "m01 wait_boot#2") {
		t.Errorf("retry did not resume at wait_boot: %v", d.trace)
	}
}

func TestAgentNeverAcceptsThenRetryWithNewInstruction(t *testing.T) {
	w := newWorld(2, 1)
	w.nodes[uuidOf(1)].agentSilent = true
	d := newDriver(t, w, startCmd("r1", machines(2), "1"))
	d.run(200)
	m1 := d.machine(1)
	if d.state.Status() != rollout.StatusFailed || m1.Failure.Step != rollout.StepReboot || !m1.Failure.TimedOut {
		t.Fatalf("%s %+v", d.state.Status(), m1.Failure)
	}
	first := m1.InstructionID
	if in := w.instr(first); in.status != "withdrawn" {
		t.Fatalf("the timed-out instruction must be withdrawn, is %s", in.status)
	}
	w.nodes[uuidOf(1)].agentSilent = false
	d.decide(rollout.Retry{})
	d.run(200)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatalf("after retry: %s", d.state.Status())
	}
	ids := instructionsFor(w, uuidOf(1))
	if len(ids) != 2 || ids[0] != first || ids[1] == first || len(w.reboots[uuidOf(1)]) != 1 {
		t.Fatalf("instructions %v reboots %v", ids, w.reboots[uuidOf(1)])
	}
	if want := rollout.InstructionID("r1", uuidOf(1), 2); ids[1] != want {
		t.Errorf("retry instruction %s, want %s", ids[1], want)
	}
}

// TestAbortMidway aborts with machines in every stage: done, rebooting,
// draining, cordoned, failed after the reboot, not started.
func TestAbortMidway(t *testing.T) {
	w := newWorld(10, 1)
	w.nodes[uuidOf(2)].neverReports = true // will fail at wait_boot... or be in it at abort
	w.nodes[uuidOf(5)].pdbBlockTicks = -1  // draining at abort
	d := newDriver(t, w, startCmd("r1", machines(10), "4"))
	// Run until m01 is done and the others are in various steps.
	for range 60 {
		d.settle()
		d.checkInvariants()
		if d.machine(1).Phase == rollout.PhaseDone && d.machine(5).Step == rollout.StepDrain {
			break
		}
		w.tick()
	}
	if d.machine(1).Phase != rollout.PhaseDone {
		t.Fatal("setup: m01 not done")
	}
	before := map[int]rollout.MachineState{}
	for i := 1; i <= 10; i++ {
		before[i] = *d.machine(i)
	}
	d.decide(rollout.Abort{By: "token:t1 (ops)", Reason: "bad revision"})
	if st := d.state.Status(); st != rollout.StatusRunning || !d.state.Aborting {
		t.Fatalf("aborting: %s", st)
	}
	d.run(400)
	if st := d.state.Status(); st != rollout.StatusAborted {
		t.Fatalf("status %s", st)
	}
	ab := eventsOf[rollout.Aborted](d.events)
	if len(ab) != 1 || len(ab[0].Machines) != 10 {
		t.Fatalf("aborted event %+v", ab)
	}
	for i, r := range ab[0].Machines {
		b, n := before[i+1], w.nodes[uuidOf(i+1)]
		switch {
		case b.Phase == rollout.PhaseWaiting:
			if r.Outcome != rollout.OutcomeNotStarted || r.Node != rollout.NodeUntouched || n.cordoned || len(w.reboots[n.uuid]) != 0 {
				t.Errorf("%s: not started, got %+v", r.Hostname, r)
			}
		case b.Phase == rollout.PhaseDone:
			if r.Outcome != rollout.OutcomeDone || n.cordoned {
				t.Errorf("%s: done, got %+v", r.Hostname, r)
			}
		case b.Rebooted && i+1 == 2:
			// Rebooted and never came back: left cordoned, and said so.
			if r.Outcome != rollout.OutcomeFailed || r.Node != rollout.NodeCordoned || !n.cordoned || !r.Rebooted {
				t.Errorf("%s: left cordoned, got %+v", r.Hostname, r)
			}
		case b.Rebooted:
			if r.Outcome != rollout.OutcomeDone || n.cordoned || n.revision != 2 {
				t.Errorf("%s: rebooted before the abort, so it finishes: %+v", r.Hostname, r)
			}
		default:
			if (r.Outcome != rollout.OutcomeReleased && r.Outcome != rollout.OutcomeDone) || n.cordoned {
				t.Errorf("%s (was %s %s): released, got %+v", r.Hostname, b.Step, b.StepStatus, r)
			}
			if r.Outcome == rollout.OutcomeReleased && (n.revision != 1 || len(w.reboots[n.uuid]) != 0) {
				t.Errorf("%s released but rebooted", r.Hostname)
			}
		}
	}
	if !d.logHas("m02 wait_boot final_state: failed at wait_boot") || !d.logHas("m05 final_state: released") {
		t.Errorf("log:\n%v", d.view().Log)
	}
	// Nothing more is ever proposed.
	if dec := Next(d.state, w.now.Add(24*time.Hour)); !dec.Final || len(dec.Commands)+len(dec.Actions) != 0 {
		t.Fatalf("after the abort: %+v", dec)
	}
}

// TestAbortWithCrashes: the same guarantees when the driver dies anywhere
// during an abort.
func TestAbortWithCrashes(t *testing.T) {
	seeds := 100
	if testing.Short() || raceEnabled {
		seeds = 25
	}
	for seed := range testSeeds(t, seeds) {
		w := newWorld(8, 1)
		w.nodes[uuidOf(4)].agentSilent = true
		d := newDriver(t, w, startCmd("r1", machines(8), "3"))
		rng := rand.New(rand.NewPCG(seed, 99))
		abortAt := 3 + rng.IntN(25)
		d.rng, d.crashP = rng, 0.15
		for tick := 0; tick < 600 && !d.state.Status().Final(); tick++ {
			if tick == abortAt {
				func() {
					defer func() { _ = recover() }()
					d.decide(rollout.Abort{})
				}()
				d.restart()
				if !d.state.Aborting {
					d.decide(rollout.Abort{}) // the first attempt crashed before its append
				}
			}
			d.settle()
			d.checkInvariants()
			d.advance()
		}
		if st := d.state.Status(); st != rollout.StatusAborted {
			t.Fatalf("seed %d: %s", seed, st)
		}
		for i := 1; i <= 8; i++ {
			n, m := w.nodes[uuidOf(i)], d.machine(i)
			if n.cordoned {
				t.Fatalf("seed %d: %s left cordoned (%s)", seed, m.Hostname, m.Phase)
			}
			if len(w.reboots[n.uuid]) > 1 || (m.Phase == rollout.PhaseReleased && len(w.reboots[n.uuid]) != 0) {
				t.Fatalf("seed %d: %s rebooted %v, phase %s", seed, m.Hostname, w.reboots[n.uuid], m.Phase)
			}
			for _, in := range w.instructions {
				if in.uuid == n.uuid && in.status == "pending" {
					t.Fatalf("seed %d: instruction %s for %s still pending after the abort", seed, in.id, m.Hostname)
				}
			}
		}
	}
}

func TestRollbackAndReapply(t *testing.T) {
	// Rollback: the machines run revision 3; the pool goes back to 2.
	w := newWorld(3, 3)
	start := startCmd("rb", machines(3), "1")
	for i := range start.Machines {
		start.Machines[i].CurrentRevision = 3
	}
	start.Rollback = true
	d := newDriver(t, w, start)
	d.run(200)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatal(d.state.Status())
	}
	for i := 1; i <= 3; i++ {
		if w.nodes[uuidOf(i)].revision != 2 || d.machine(i).Kind != rollout.KindReboot {
			t.Errorf("machine %d: %+v", i, w.nodes[uuidOf(i)])
		}
	}
	if v := d.view(); !v.Rollback || !strings.Contains(v.Log[0].Message, "rollback of pool workers to revision 2") {
		t.Errorf("view %+v", v.Log[0])
	}

	// Re-applying the revision the machines run re-reboots them.
	w2 := newWorld(2, 2)
	st2 := startCmd("again", machines(2), "1")
	for i := range st2.Machines {
		st2.Machines[i].CurrentRevision = 2
	}
	d2 := newDriver(t, w2, st2)
	d2.run(200)
	for i := 1; i <= 2; i++ {
		if d2.machine(i).Kind != rollout.KindReapply || len(w2.reboots[uuidOf(i)]) != 1 {
			t.Errorf("machine %d: kind %s, reboots %v", i, d2.machine(i).Kind, w2.reboots[uuidOf(i)])
		}
	}
}

func TestMaintenanceWindows(t *testing.T) {
	// A 10-minute window every day at 10:00 in Zurich (08:00 UTC in
	// summer). t0 is Monday 09:00 UTC, just after Monday's window.
	w := newWorld(6, 1)
	start := startCmd("win", machines(6), "2")
	windows := []values.Window{{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, Start: "10:00", End: "10:10", TimeZone: "Europe/Zurich"}}
	start.Strategy.MaintenanceWindows = windows
	d := newDriver(t, w, start)
	d.run(2000)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatalf("status %s", d.state.Status())
	}
	inWindow := func(at time.Time) bool { return values.InMaintenanceWindow(windows, at) }
	sawLate := false
	for _, e := range d.events {
		switch e := e.(type) {
		case rollout.MachineBegun:
			if !inWindow(e.At) {
				t.Errorf("%s began outside the window at %s", e.Machine, e.At)
			}
		case rollout.StepStarted:
			if e.Step.Disruptive() && !inWindow(e.At) {
				t.Errorf("%s %s started outside the window at %s", e.Machine, e.Step, e.At)
			}
			if !e.Step.Disruptive() && !inWindow(e.At) {
				sawLate = true // a machine that rebooted in the window finishes after it
			}
		}
	}
	if !sawLate {
		t.Error("expected steps that give capacity back to run after the window closed")
	}
	first := eventsOf[rollout.MachineBegun](d.events)[0].At
	if want := time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC); !first.Equal(want) {
		t.Errorf("first machine began at %s, want %s (Tuesday's window)", first, want)
	}
	// The plan says why it waits and wakes when the next window opens,
	// at most an hour ahead.
	s := fold(d.events[:1])
	s.Apply(rollout.ChecksRecorded{Results: passing(), At: t0})
	dec := Next(s, t0.Add(30*time.Second))
	if len(dec.Commands) != 0 || len(dec.Waiting) != 1 || dec.Waiting[0].Reason != rollout.BlockWindow || !dec.Wake.Equal(t0.Add(time.Hour+30*time.Second)) {
		t.Errorf("outside the window: %+v", dec)
	}
	tuesday0745 := time.Date(2025, 6, 3, 7, 45, 0, 0, time.UTC)
	if dec := Next(s, tuesday0745); !dec.Wake.Equal(time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("wake %s, want Tuesday's opening at 08:00 UTC", dec.Wake)
	}
}

func passing() []rollout.CheckResult {
	var rs []rollout.CheckResult
	for _, n := range rollout.RequiredChecks {
		rs = append(rs, rollout.CheckResult{Name: n, Passed: true})
	}
	return rs
}

func TestOrderControlPlaneUpgradeIndexName(t *testing.T) {
	ms := []rollout.Machine{
		{UUID: uuidOf(1), Hostname: "w-b", UpgradeIndex: 2},
		{UUID: uuidOf(2), Hostname: "w-a"},
		{UUID: uuidOf(3), Hostname: "cp-2", ControlPlane: true, UpgradeIndex: 1},
		{UUID: uuidOf(4), Hostname: "w-c", UpgradeIndex: 1},
		{UUID: uuidOf(5), Hostname: "cp-1", ControlPlane: true, UpgradeIndex: 1},
		{UUID: uuidOf(6), Hostname: "cp-0", ControlPlane: true},
		{UUID: uuidOf(7), Hostname: "w-0"},
		{UUID: uuidOf(8), Hostname: "w-a2", UpgradeIndex: 2},
	}
	w := newWorld(8, 1)
	d := newDriver(t, w, startCmd("ord", ms, "3"))
	d.run(500)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatal(d.state.Status())
	}
	var begins []string
	for _, l := range d.trace {
		if strings.HasPrefix(l, "begin ") || strings.HasPrefix(l, "done ") {
			begins = append(begins, l)
		}
	}
	want := []string{
		// control plane, one at a time: upgradeIndex 1 (by name), then unset
		"begin cp-1", "done cp-1", "begin cp-2", "done cp-2", "begin cp-0", "done cp-0",
		// workers, three at a time: index 1, index 2 by name, then unset by name
		"begin w-c", "begin w-a2", "begin w-b", "done w-c", "begin w-0", "done w-a2", "begin w-a",
		"done w-b", "done w-0", "done w-a",
	}
	if !slices.Equal(begins, want) {
		t.Errorf("order\n%v\nwant\n%v", begins, want)
	}
}

func TestMaxUnavailableIntegerAndPercentage(t *testing.T) {
	for _, tc := range []struct {
		mu        string
		poolSize  int
		wantOut   int
		wantBudge int
	}{
		{"1", 0, 1, 1},
		{"3", 0, 3, 3},
		{"0", 0, 1, 1},      // at least 1: bare metal cannot surge
		{"25%", 0, 2, 2},    // 2.5 rounds down
		{"5%", 0, 1, 1},     // 0.5 rounds down to 0, then at least 1
		{"100%", 0, 10, 10}, // all at once
		{"50%", 40, 10, 20}, // of the pool (40), capped by the 10 machines rolled
		{"20", 0, 10, 10},   // at most the pool size
	} {
		t.Run(tc.mu, func(t *testing.T) {
			w := newWorld(10, 1)
			st := startCmd("mu", machines(10), tc.mu)
			st.PoolSize = tc.poolSize
			d := newDriver(t, w, st)
			if d.state.Budget() != tc.wantBudge {
				t.Fatalf("budget %d, want %d", d.state.Budget(), tc.wantBudge)
			}
			d.run(500)
			if d.state.Status() != rollout.StatusSucceeded || d.maxOut != tc.wantOut {
				t.Fatalf("status %s, max out %d, want %d", d.state.Status(), d.maxOut, tc.wantOut)
			}
		})
	}
}

func TestAfterOrdersPoolRollouts(t *testing.T) {
	w := newWorld(6, 1)
	a := newDriver(t, w, startCmd("ra", machines(6)[:3], "1"))
	stB := startCmd("rb", machines(6)[3:], "3")
	stB.Pool, stB.After = "gpu", "ra"
	b := newDriver(t, w, stB)
	b.others["ra"] = a
	firstB := time.Time{}
	for range 300 {
		a.settle()
		b.settle()
		a.checkInvariants()
		b.checkInvariants()
		if b.state.Out() > 0 && firstB.IsZero() {
			firstB = w.now
			if a.state.Status() != rollout.StatusSucceeded {
				t.Fatalf("rb began while ra is %s", a.state.Status())
			}
		}
		if a.state.Status().Final() && b.state.Status().Final() {
			break
		}
		w.tick()
	}
	if a.state.Status() != rollout.StatusSucceeded || b.state.Status() != rollout.StatusSucceeded {
		t.Fatalf("ra %s, rb %s", a.state.Status(), b.state.Status())
	}
	if !b.logHas("dependency: rollout ra succeeded; this one goes on") {
		t.Errorf("log %v", b.view().Log)
	}

	// An aborted predecessor fails the rollout that waits for it; nothing
	// is touched.
	w2 := newWorld(4, 1)
	a2 := newDriver(t, w2, startCmd("ra", machines(4)[:2], "1"))
	st := startCmd("rb", machines(4)[2:], "1")
	st.After = "ra"
	b2 := newDriver(t, w2, st)
	b2.others["ra"] = a2
	a2.decide(rollout.Abort{})
	a2.settle()
	b2.settle()
	if b2.state.Status() != rollout.StatusFailed || !strings.Contains(b2.state.Reason, "rollout ra, which this one comes after, was aborted") {
		t.Fatalf("rb %s: %s", b2.state.Status(), b2.state.Reason)
	}
	if b2.state.Count(rollout.PhaseWaiting) != 2 {
		t.Fatal("machines were touched")
	}
}

func TestFailedChecksTouchNothingThenRetry(t *testing.T) {
	w := newWorld(3, 1)
	d := newDriver(t, w, startCmd("chk", machines(3), "1"))
	fail := true
	d.checks = func() []rollout.CheckResult {
		rs := passing()
		if fail {
			rs[3] = rollout.CheckResult{Name: rollout.CheckMachinesHealthy, Machine: uuidOf(2), Reason: "node m02 is NotReady"}
			rs[4] = rollout.CheckResult{Name: rollout.CheckCapacity, Reason: "PodDisruptionBudget shop/cart allows 0 disruptions"}
		}
		return rs
	}
	d.run(50)
	if d.state.Status() != rollout.StatusFailed || d.state.Count(rollout.PhaseWaiting) != 3 {
		t.Fatalf("%s", d.state.Status())
	}
	for _, want := range []string{"machines_healthy (" + uuidOf(2) + "): node m02 is NotReady", "capacity: PodDisruptionBudget shop/cart allows 0 disruptions", "nothing was touched"} {
		if !strings.Contains(d.state.Reason, want) {
			t.Errorf("reason %q lacks %q", d.state.Reason, want)
		}
	}
	if !d.logHas("check_failed: machines_healthy (m02): node m02 is NotReady") {
		t.Errorf("log %v", d.view().Log)
	}
	for _, n := range w.nodes {
		if n.cordoned || len(w.instructions) > 0 {
			t.Fatal("touched")
		}
	}
	fail = false
	d.decide(rollout.Retry{})
	d.run(200)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatal(d.state.Status())
	}
	if n := len(eventsOf[rollout.ChecksRecorded](d.events)); n != 2 {
		t.Errorf("checks recorded %d times", n)
	}
}

func TestPauseResumeAndPauseBetweenMachines(t *testing.T) {
	w := newWorld(4, 1)
	st := startCmd("p", machines(4), "1")
	st.Strategy.Pause = values.Duration(10 * time.Minute)
	d := newDriver(t, w, st)
	for range 5 {
		d.settle()
		w.tick()
	}
	d.decide(rollout.Pause{By: "ops", Reason: "watching metrics"})
	d.run(100)
	// m01 finished; nothing else began.
	if d.state.Status() != rollout.StatusPaused || d.machine(1).Phase != rollout.PhaseDone || d.machine(2).Phase != rollout.PhaseWaiting {
		t.Fatalf("%s %s %s", d.state.Status(), d.machine(1).Phase, d.machine(2).Phase)
	}
	dec := Next(d.state, w.now)
	if len(dec.Waiting) != 1 || dec.Waiting[0].Reason != rollout.BlockPaused {
		t.Fatalf("%+v", dec)
	}
	d.decide(rollout.Resume{})
	d.run(500)
	if d.state.Status() != rollout.StatusSucceeded {
		t.Fatal(d.state.Status())
	}
	begun := eventsOf[rollout.MachineBegun](d.events)
	done := eventsOf[rollout.MachineDone](d.events)
	for i := 1; i < len(begun); i++ {
		if gap := begun[i].At.Sub(done[i-1].At); gap < 10*time.Minute {
			t.Errorf("machine %d began %s after the previous one finished", i+1, gap)
		}
	}
}

// TestManyScenariosWithCrashes mixes everything: random blocks, silent
// agents, windows, retries and aborts, with crashes. Invariants are
// checked at every step by the driver.
func TestManyScenariosWithCrashes(t *testing.T) {
	n := 200
	if testing.Short() || raceEnabled {
		n = 40
	}
	stats := map[string]int{}
	defer func() { t.Logf("outcomes: %v", stats) }()
	for seed := range testSeeds(t, n) {
		rng := rand.New(rand.NewPCG(seed, 2024))
		size := 1 + rng.IntN(9)
		w := newWorld(size, 1)
		ms := machines(size)
		for i := range ms {
			ms[i].ControlPlane = rng.IntN(5) == 0
			ms[i].UpgradeIndex = rng.IntN(3)
			ms[i].NoNode = rng.IntN(6) == 0
			n := w.nodes[ms[i].UUID]
			switch rng.IntN(8) {
			case 0:
				n.pdbBlockTicks = rng.IntN(30) - 1
			case 1:
				n.agentSilent = true
			case 2:
				n.neverReports = true
			case 3:
				n.notReadyBoots = 1 + rng.IntN(2)
			}
		}
		st := startCmd("mix", ms, []string{"1", "2", "50%", "100%", "10%"}[rng.IntN(5)])
		st.Strategy.RemediationMaxInFlight = rng.IntN(3)
		if rng.IntN(3) == 0 {
			st.Strategy.MaintenanceWindows = []values.Window{{Days: []string{"mon", "wed", "fri"}, Start: "09:00", End: "11:00", TimeZone: "UTC"}}
		}
		d := newDriver(t, w, st)
		d.rng, d.crashP = rng, 0.1
		for tick := 0; tick < 3000 && !d.state.Status().Final(); tick++ {
			d.settle()
			d.checkInvariants()
			switch {
			case d.state.Status() == rollout.StatusFailed && rng.IntN(4) == 0:
				for _, x := range w.nodes { // someone fixes things
					x.pdbBlockTicks, x.agentSilent, x.neverReports, x.notReadyBoots = 0, false, false, 0
				}
				d.safeDecide(rollout.Retry{})
			case d.state.Status() == rollout.StatusFailed && rng.IntN(8) == 0:
				d.safeDecide(rollout.Abort{})
			case rng.IntN(200) == 0:
				d.safeDecide(rollout.Pause{})
			case rng.IntN(50) == 0:
				d.safeDecide(rollout.Resume{})
			}
			d.advance()
		}
		if !d.state.Status().Final() {
			t.Fatalf("seed %d: not final: %s\n%v", seed, d.state.Status(), d.trace)
		}
		stats[string(d.state.Status())]++
		stats["retries"] += d.state.Retries
		stats["crashes"] += d.crashes
		for _, r := range d.state.Report() {
			stats[string(r.Outcome)]++
		}
		for i := range d.state.Machines {
			m := &d.state.Machines[i]
			n := w.nodes[m.UUID]
			if n.cordoned && m.Phase != rollout.PhaseFailed {
				t.Fatalf("seed %d: %s cordoned but %s", seed, m.Hostname, m.Phase)
			}
			if m.Phase == rollout.PhaseFailed && m.Node == rollout.NodeUntouched && n.cordoned {
				t.Fatalf("seed %d: %s cordoned without saying so", seed, m.Hostname)
			}
		}
	}
}

// safeDecide decides a user command, which may crash the driver.
func (d *driver) safeDecide(c rollout.Command) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crashed); !ok {
				panic(r)
			}
			d.restart()
		}
	}()
	d.decide(c)
}

func TestOperationView(t *testing.T) {
	w := newWorld(3, 1)
	w.nodes[uuidOf(3)].pdbBlockTicks = -1
	d := newDriver(t, w, startCmd("op", machines(3), "1"))
	d.run(300)
	v := d.view()
	if v.Status != rollout.StatusFailed || v.Progress.String() != "2 of 3" || v.Progress.Failed != 1 {
		t.Fatalf("%s %s %+v", v.Status, v.Progress, v.Progress)
	}
	if v.Machines[2].Outcome != rollout.OutcomeFailed || v.Machines[2].Node != rollout.NodeCordoned {
		t.Fatalf("%+v", v.Machines[2])
	}
	var lines []string
	for _, e := range v.Log {
		if e.Node == "m01" && e.Outcome != operation.LogFinalState {
			lines = append(lines, fmt.Sprintf("%s %s %s", e.At.Format("15:04"), e.Step, e.Outcome))
		}
	}
	want := []string{
		"09:00  begun", "09:00 cordon started", "09:00 cordon succeeded", "09:00 drain started", "09:00 drain succeeded",
		"09:00 reboot started", "09:01 reboot succeeded", "09:01 wait_boot started", "09:04 wait_boot succeeded",
		"09:04 wait_ready started", "09:06 wait_ready succeeded", "09:06 uncordon started", "09:06 uncordon succeeded", "09:06  done",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("m01 log\n%v\nwant\n%v", lines, want)
	}
	// Incremental and whole projections agree.
	var inc operation.View
	for _, e := range d.events {
		inc.Apply(e)
	}
	if fmt.Sprint(inc.Log) != fmt.Sprint(v.Log) || inc.Progress != v.Progress {
		t.Error("incremental view differs")
	}
}

// A machine that boots but whose node never turns Ready is remediated
// with one more reboot (a reapply, a new instruction id) when the
// strategy allows it; a second failure is final.
func TestRemediationGivesOneMoreReboot(t *testing.T) {
	for _, c := range []struct {
		name      string
		failBoots int
		want      rollout.Status
	}{{"recovers", 1, rollout.StatusSucceeded}, {"fails again", 2, rollout.StatusFailed}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(3, 1)
			w.nodes[uuidOf(1)].notReadyBoots = c.failBoots
			start := startCmd("r1", machines(3), "1")
			start.Strategy.RemediationMaxInFlight = 1
			d := newDriver(t, w, start)
			d.run(1200)
			if st := d.state.Status(); st != c.want {
				t.Fatalf("status %s (%s)", st, d.state.Reason)
			}
			ids := instructionsFor(w, uuidOf(1))
			if len(ids) != 2 || len(w.reboots[uuidOf(1)]) != 2 || ids[0] == ids[1] {
				t.Fatalf("m01 instructions %v reboots %v; want two distinct", ids, w.reboots[uuidOf(1)])
			}
			if in := w.instr(ids[1]); in.kind != rollout.KindReapply {
				t.Fatalf("the remediation's instruction is a %s", in.kind)
			}
			if m := d.machine(1); m.Remediations != 1 || m.Remediating {
				t.Fatalf("m01 remediations %d remediating %v", m.Remediations, m.Remediating)
			}
			if !d.logHas("remediated: wait_ready timed out; one more reboot into revision") {
				t.Fatal("the log does not show the remediation")
			}
			// Without remediation the same world fails at once, after one reboot.
			w2 := newWorld(3, 1)
			w2.nodes[uuidOf(1)].notReadyBoots = c.failBoots
			d2 := newDriver(t, w2, startCmd("r1", machines(3), "1"))
			d2.run(1200)
			if st := d2.state.Status(); st != rollout.StatusFailed || len(w2.reboots[uuidOf(1)]) != 1 {
				t.Fatalf("without remediation: %s, %d reboots", st, len(w2.reboots[uuidOf(1)]))
			}
		})
	}
}
