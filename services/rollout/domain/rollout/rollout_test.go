package rollout

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
)

var t0 = time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC) // a Monday

func uuidOf(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func fxMachines(n int) []Machine {
	ms := make([]Machine, n)
	for i := range ms {
		ms[i] = Machine{UUID: uuidOf(i + 1), Hostname: fmt.Sprintf("m%02d", i+1), CurrentRevision: 1}
	}
	return ms
}

func fxStart(n int, mu string) Start {
	return Start{ID: "r1", Pool: "workers", Revision: 2, Machines: fxMachines(n),
		Strategy: Strategy{PoolSettings: PoolSettings{MaxUnavailable: values.IntOrPercent(mu)}}}
}

func passing() []CheckResult {
	var rs []CheckResult
	for _, n := range RequiredChecks {
		rs = append(rs, CheckResult{Name: n, Passed: true})
	}
	return rs
}

// must decides cmd and folds its events into s.
func must(t *testing.T, s *State, cmd Command, now time.Time) []any {
	t.Helper()
	before := s.Clone()
	evs, err := Decide(*s, cmd, now)
	if err != nil {
		t.Fatalf("%s: %v", cmd.CommandType(), err)
	}
	if !reflect.DeepEqual(before, *s) {
		t.Fatalf("%s: Decide mutated the state", cmd.CommandType())
	}
	for _, e := range evs {
		s.Apply(e)
		checkTally(t, s)
	}
	return evs
}

func types(evs []any) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.(interface{ EventType() string }).EventType())
	}
	return out
}

// running returns a started rollout whose checks passed.
func running(t *testing.T, n int, mu string) State {
	var s State
	must(t, &s, fxStart(n, mu), t0)
	must(t, &s, RecordChecks{Results: passing()}, t0)
	return s
}

// walk takes machine i through its steps up to and including step (started).
func walk(t *testing.T, s *State, i int, upTo Step, now time.Time) {
	t.Helper()
	u := uuidOf(i)
	m, _ := s.Machine(u)
	if m.Phase == PhaseWaiting {
		must(t, s, BeginMachine{Machine: u}, now)
	}
	for _, st := range m.steps() {
		m, _ = s.Machine(u)
		if m.Step == st && m.StepStatus == StepStatusRunning {
			if st == upTo {
				return
			}
		} else if m.Step != st || m.StepStatus != StepStatusSucceeded {
			c := StartStep{Machine: u, Step: st, Attempt: m.NextAttempt(st)}
			if st == StepReboot {
				c.InstructionID = InstructionID(s.ID, u, c.Attempt)
			}
			must(t, s, c, now)
		}
		if st == upTo {
			return
		}
		m, _ = s.Machine(u)
		if m.StepStatus == StepStatusRunning {
			must(t, s, SucceedStep{Machine: u, Step: st, Attempt: m.Attempt}, now)
		}
	}
}

func TestStartValidation(t *testing.T) {
	bad := Start{
		ID: "bad id", Pool: "Bad_Pool", Revision: 0, After: "bad id",
		Machines: []Machine{
			{UUID: "NOT-A-UUID", Hostname: "ok"},
			{UUID: uuidOf(1), Hostname: "Bad_Host"},
			{UUID: uuidOf(1), Hostname: "dup", UpgradeIndex: -1},
		},
		PoolSize: 2,
		Strategy: Strategy{
			PoolSettings: PoolSettings{MaxUnavailable: "150%", DrainTimeout: values.Duration(48 * time.Hour)},
			StepTimeouts: StepTimeouts{CordonTimeout: values.Duration(time.Millisecond)},
		},
	}
	_, err := Decide(State{}, bad, t0)
	if errs.KindOf(err) != errs.KindValidation {
		t.Fatalf("%v", err)
	}
	var fields []string
	for _, f := range errs.As(err).Fields {
		fields = append(fields, f.Field)
	}
	want := []string{
		"id", "pool", "revision", "after", "machines[0].uuid", "machines[1].hostname", "machines[2].uuid",
		"machines[2].upgrade_index", "pool_size", "strategy.max_unavailable", "strategy.drain_timeout", "strategy.cordon_timeout",
	}
	if !slices.Equal(fields, want) {
		t.Errorf("fields\n%v\nwant\n%v", fields, want)
	}
	st := fxStart(1, "1")
	st.After = st.ID
	if _, err := Decide(State{}, st, t0); errs.KindOf(err) != errs.KindValidation || !strings.Contains(err.Error(), "cannot come after itself") {
		t.Errorf("%v", err)
	}
}

func TestStartDefaultsAndOrder(t *testing.T) {
	var s State
	st := fxStart(3, "")
	st.Machines = []Machine{
		{UUID: uuidOf(1), Hostname: "w-b"},
		{UUID: uuidOf(2), Hostname: "w-a", UpgradeIndex: 5},
		{UUID: uuidOf(3), Hostname: "cp", ControlPlane: true},
		{UUID: uuidOf(4), Hostname: "w-a"},
	}
	evs := must(t, &s, st, t0)
	e := evs[0].(Started)
	var order []string
	for _, m := range e.Machines {
		order = append(order, m.Hostname+"/"+m.UUID[len(m.UUID)-1:])
	}
	if want := []string{"cp/3", "w-a/2", "w-a/4", "w-b/1"}; !slices.Equal(order, want) {
		t.Errorf("order %v want %v", order, want)
	}
	if e.PoolSize != 4 || e.Strategy.MaxUnavailable != "1" || e.Strategy.DrainTimeout != values.DefaultDrainTimeout ||
		e.Strategy.NodeReadyTimeout != values.DefaultNodeReadyTimeout || e.Strategy.CordonTimeout != DefaultCordonTimeout ||
		e.Strategy.RebootTimeout != DefaultRebootTimeout || e.Strategy.UncordonTimeout != DefaultUncordonTimeout {
		t.Errorf("defaults: %+v", e)
	}
	if s.Status() != StatusPending || !s.Active() {
		t.Errorf("status %s", s.Status())
	}
	if _, err := Decide(s, st, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("second start: %v", err)
	}
	if _, err := Decide(State{}, Pause{}, t0); errs.KindOf(err) != errs.KindNotFound {
		t.Errorf("pause of nothing: %v", err)
	}
}

func TestBudgetRounding(t *testing.T) {
	for _, tc := range []struct {
		mu         string
		pool, want int
	}{
		{"1", 10, 1}, {"0", 10, 1}, {"3", 10, 3}, {"30", 10, 10},
		{"0%", 10, 1}, {"9%", 10, 1}, {"10%", 10, 1}, {"19%", 10, 1}, {"20%", 10, 2}, {"25%", 10, 2},
		{"33%", 3, 1}, {"34%", 3, 1}, {"67%", 3, 2}, {"100%", 3, 3}, {"50%", 1, 1}, {"50%", 7, 3},
	} {
		s := State{PoolSize: tc.pool, Strategy: Strategy{PoolSettings: PoolSettings{MaxUnavailable: values.IntOrPercent(tc.mu)}}}
		if got := s.Budget(); got != tc.want {
			t.Errorf("%s of %d: %d, want %d", tc.mu, tc.pool, got, tc.want)
		}
	}
}

// TestCommandMatrix checks every operator command against every rollout
// status.
func TestCommandMatrix(t *testing.T) {
	states := map[string]func(t *testing.T) State{
		"pending": func(t *testing.T) State {
			var s State
			must(t, &s, fxStart(2, "1"), t0)
			return s
		},
		"running": func(t *testing.T) State {
			s := running(t, 2, "1")
			walk(t, &s, 1, StepDrain, t0)
			return s
		},
		"paused": func(t *testing.T) State {
			s := running(t, 2, "1")
			must(t, &s, Pause{}, t0)
			return s
		},
		"aborting": func(t *testing.T) State {
			s := running(t, 2, "1")
			walk(t, &s, 1, StepWaitBoot, t0)
			must(t, &s, Abort{}, t0)
			return s
		},
		"failed": func(t *testing.T) State {
			s := running(t, 2, "1")
			walk(t, &s, 1, StepDrain, t0)
			must(t, &s, FailStep{Machine: uuidOf(1), Step: StepDrain, Attempt: 1, Reason: "boom"}, t0)
			return s
		},
		"succeeded": func(t *testing.T) State {
			s := running(t, 1, "1")
			walk(t, &s, 1, StepUncordon, t0)
			must(t, &s, SucceedStep{Machine: uuidOf(1), Step: StepUncordon, Attempt: 1}, t0)
			must(t, &s, CompleteMachine{Machine: uuidOf(1)}, t0)
			return s
		},
		"aborted": func(t *testing.T) State {
			s := running(t, 2, "1")
			must(t, &s, Abort{}, t0)
			return s
		},
	}
	// status → command → events, "·" for a no-op, or "✗" for a conflict.
	matrix := map[string]map[string]string{
		"pending":   {"pause": "rollout.paused", "resume": "·", "abort": "rollout.abort_requested rollout.aborted", "retry": "✗"},
		"running":   {"pause": "rollout.paused", "resume": "·", "abort": "rollout.abort_requested", "retry": "✗"},
		"paused":    {"pause": "·", "resume": "rollout.resumed", "abort": "rollout.abort_requested rollout.aborted", "retry": "✗"},
		"aborting":  {"pause": "✗", "resume": "✗", "abort": "·", "retry": "✗"},
		"failed":    {"pause": "✗", "resume": "✗", "abort": "rollout.abort_requested", "retry": "rollout.retried"},
		"succeeded": {"pause": "✗", "resume": "✗", "abort": "✗", "retry": "✗"},
		"aborted":   {"pause": "✗", "resume": "✗", "abort": "✗", "retry": "✗"},
	}
	cmds := map[string]Command{"pause": Pause{}, "resume": Resume{}, "abort": Abort{}, "retry": Retry{}}
	for st, row := range matrix {
		for name, want := range row {
			t.Run(st+"/"+name, func(t *testing.T) {
				s := states[st](t)
				if got := s.Status(); string(got) != st && !(st == "aborting" && got == StatusRunning && s.Aborting) {
					t.Fatalf("fixture is %s", got)
				}
				evs, err := Decide(s, cmds[name], t0)
				var got string
				switch {
				case err != nil && errs.KindOf(err) == errs.KindConflict:
					got = "✗"
					if !strings.Contains(err.Error(), "rollout r1 is ") {
						t.Errorf("conflict must say what the rollout is: %v", err)
					}
				case err != nil:
					t.Fatalf("%v", err)
				case len(evs) == 0:
					got = "·"
				default:
					got = strings.Join(types(evs), " ")
				}
				if got != want {
					t.Errorf("got %s, want %s (%v)", got, want, err)
				}
			})
		}
	}
}

func TestConflictMessages(t *testing.T) {
	s := running(t, 1, "1")
	walk(t, &s, 1, StepUncordon, t0)
	must(t, &s, SucceedStep{Machine: uuidOf(1), Step: StepUncordon, Attempt: 1}, t0)
	must(t, &s, CompleteMachine{Machine: uuidOf(1)}, t0)
	_, err := Decide(s, Resume{}, t0)
	if err == nil || err.Error() != "rollout r1 is succeeded; it cannot be resumed" {
		t.Errorf("%v", err)
	}
	f := running(t, 2, "1")
	walk(t, &f, 1, StepDrain, t0)
	must(t, &f, FailStep{Machine: uuidOf(1), Step: StepDrain, Attempt: 1, Reason: "drain timed out after 15m0s", TimedOut: true}, t0)
	_, err = Decide(f, Resume{}, t0)
	want := "rollout r1 is failed (machine m01 failed at drain: drain timed out after 15m0s; its node stays cordoned); it cannot be resumed; retry it instead"
	if err == nil || err.Error() != want {
		t.Errorf("%v\nwant %s", err, want)
	}
}

func TestBeginRules(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		s := running(t, 3, "2")
		_, err := Decide(s, BeginMachine{Machine: uuidOf(2)}, t0)
		if errs.KindOf(err) != errs.KindConflict || !strings.Contains(err.Error(), "rollout order; the next one is m01") {
			t.Errorf("%v", err)
		}
	})
	t.Run("budget", func(t *testing.T) {
		s := running(t, 3, "2")
		must(t, &s, BeginMachine{Machine: uuidOf(1)}, t0)
		must(t, &s, BeginMachine{Machine: uuidOf(2)}, t0)
		_, err := Decide(s, BeginMachine{Machine: uuidOf(3)}, t0)
		if !strings.Contains(fmt.Sprint(err), "2 of at most 2 machines are out (maxUnavailable 2 of 3)") {
			t.Errorf("%v", err)
		}
	})
	t.Run("checks", func(t *testing.T) {
		var s State
		must(t, &s, fxStart(1, "1"), t0)
		if _, err := Decide(s, BeginMachine{Machine: uuidOf(1)}, t0); !strings.Contains(fmt.Sprint(err), "sanity checks have not passed") {
			t.Errorf("%v", err)
		}
	})
	t.Run("halted", func(t *testing.T) {
		s := running(t, 3, "3")
		walk(t, &s, 1, StepCordon, t0)
		walk(t, &s, 2, StepDrain, t0)
		must(t, &s, FailStep{Machine: uuidOf(1), Step: StepCordon, Attempt: 1, Reason: "forbidden"}, t0)
		if s.Status() != StatusRunning {
			t.Fatalf("m02 is in flight: the rollout runs on, halted; got %s", s.Status())
		}
		if _, err := Decide(s, BeginMachine{Machine: uuidOf(3)}, t0); !strings.Contains(fmt.Sprint(err), "machine m01 failed at cordon: forbidden; its node stays cordoned; no new machine begins") {
			t.Errorf("%v", err)
		}
	})
	t.Run("control plane one at a time, workers after", func(t *testing.T) {
		var s State
		st := fxStart(3, "3")
		st.Machines[0].ControlPlane, st.Machines[1].ControlPlane = true, true
		must(t, &s, st, t0)
		must(t, &s, RecordChecks{Results: passing()}, t0)
		if got, _ := s.BeginCandidates(t0); !slices.Equal(got, []string{uuidOf(1)}) {
			t.Fatalf("%v", got)
		}
		must(t, &s, BeginMachine{Machine: uuidOf(1)}, t0)
		if _, blk := s.BeginCandidates(t0); blk == nil || blk.Reason != BlockControlPlane {
			t.Fatalf("%+v", blk)
		}
		walk(t, &s, 1, StepUncordon, t0)
		must(t, &s, SucceedStep{Machine: uuidOf(1), Step: StepUncordon, Attempt: 1}, t0)
		must(t, &s, CompleteMachine{Machine: uuidOf(1)}, t0)
		must(t, &s, BeginMachine{Machine: uuidOf(2)}, t0)
		if _, blk := s.BeginCandidates(t0); blk == nil || blk.Reason != BlockControlPlane || !strings.Contains(blk.Message, "workers begin once every control-plane machine is done; m02 is active") {
			t.Fatalf("%+v", blk)
		}
	})
	t.Run("window", func(t *testing.T) {
		var s State
		st := fxStart(1, "1")
		st.Strategy.MaintenanceWindows = []values.Window{{Days: []string{"mon"}, Start: "22:00", End: "02:00", TimeZone: "UTC"}}
		must(t, &s, st, t0)
		must(t, &s, RecordChecks{Results: passing()}, t0)
		if _, err := Decide(s, BeginMachine{Machine: uuidOf(1)}, t0); !strings.Contains(fmt.Sprint(err), "outside every maintenance window") {
			t.Errorf("%v", err)
		}
		tuesday1am := time.Date(2025, 6, 3, 1, 0, 0, 0, time.UTC) // the morning part of Monday's window
		must(t, &s, BeginMachine{Machine: uuidOf(1)}, tuesday1am)
		must(t, &s, StartStep{Machine: uuidOf(1), Step: StepCordon, Attempt: 1}, tuesday1am)
		must(t, &s, SucceedStep{Machine: uuidOf(1), Step: StepCordon, Attempt: 1}, tuesday1am)
		// The window closed: the drain waits, and says the node stays cordoned.
		_, err := Decide(s, StartStep{Machine: uuidOf(1), Step: StepDrain, Attempt: 1}, tuesday1am.Add(time.Hour))
		if !strings.Contains(fmt.Sprint(err), "drain of m01 waits for a maintenance window; the next one opens at 2025-06-09T22:00:00Z; its node stays cordoned meanwhile") {
			t.Errorf("%v", err)
		}
	})
	t.Run("pause between machines", func(t *testing.T) {
		var s State
		st := fxStart(2, "1")
		st.Strategy.Pause = values.Duration(5 * time.Minute)
		must(t, &s, st, t0)
		must(t, &s, RecordChecks{Results: passing()}, t0)
		walk(t, &s, 1, StepUncordon, t0)
		must(t, &s, SucceedStep{Machine: uuidOf(1), Step: StepUncordon, Attempt: 1}, t0)
		must(t, &s, CompleteMachine{Machine: uuidOf(1)}, t0.Add(time.Minute))
		_, blk := s.BeginCandidates(t0.Add(5 * time.Minute))
		if blk == nil || blk.Reason != BlockPause || !blk.Until.Equal(t0.Add(6*time.Minute)) {
			t.Fatalf("%+v", blk)
		}
		must(t, &s, BeginMachine{Machine: uuidOf(2)}, t0.Add(6*time.Minute))
	})
}

func TestStepRules(t *testing.T) {
	s := running(t, 2, "2")
	u := uuidOf(1)
	must(t, &s, BeginMachine{Machine: u}, t0)
	if _, err := Decide(s, StartStep{Machine: u, Step: StepDrain, Attempt: 1}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("drain before cordon: %v", err)
	}
	if _, err := Decide(s, StartStep{Machine: u, Step: "dance", Attempt: 1}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("unknown step: %v", err)
	}
	if _, err := Decide(s, StartStep{Machine: uuidOf(9), Step: StepCordon, Attempt: 1}, t0); errs.KindOf(err) != errs.KindNotFound {
		t.Errorf("unknown machine: %v", err)
	}
	if _, err := Decide(s, StartStep{Machine: u, Step: StepCordon, Attempt: 2}, t0); !strings.Contains(fmt.Sprint(err), "the next attempt is 1 (the proposal is stale)") {
		t.Errorf("stale attempt: %v", err)
	}
	evs := must(t, &s, StartStep{Machine: u, Step: StepCordon, Attempt: 1}, t0)
	if e := evs[0].(StepStarted); !e.Deadline.Equal(t0.Add(5*time.Minute)) || e.InstructionID != "" {
		t.Errorf("%+v", e)
	}
	// A repeated report is a no-op; a stale one a conflict. The cordon
	// records the node's boot id, which wait_ready compares with.
	must(t, &s, SucceedStep{Machine: u, Step: StepCordon, Attempt: 1, NodeBootID: "boot-1"}, t0)
	if m, _ := s.Machine(u); m.NodeBootIDBefore != "boot-1" {
		t.Errorf("the cordon recorded boot id %q, want boot-1", m.NodeBootIDBefore)
	}
	if evs, err := Decide(s, SucceedStep{Machine: u, Step: StepCordon, Attempt: 1}, t0); err != nil || len(evs) != 0 {
		t.Errorf("repeat: %v %v", evs, err)
	}
	if _, err := Decide(s, FailStep{Machine: u, Step: StepCordon, Attempt: 1, Reason: "late"}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("late failure: %v", err)
	}
	if _, err := Decide(s, FailStep{Machine: u, Step: StepCordon, Attempt: 1}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("failure without reason: %v", err)
	}
	must(t, &s, StartStep{Machine: u, Step: StepDrain, Attempt: 1}, t0)
	if _, err := Decide(s, CancelStep{Machine: u, Step: StepDrain, Attempt: 1}, t0); !strings.Contains(fmt.Sprint(err), "only an abort cancels steps") {
		t.Errorf("cancel: %v", err)
	}
	must(t, &s, SucceedStep{Machine: u, Step: StepDrain, Attempt: 1}, t0)
	// The reboot needs an instruction id, never one used before.
	if _, err := Decide(s, StartStep{Machine: u, Step: StepReboot, Attempt: 1}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("reboot without id: %v", err)
	}
	id := InstructionID("r1", u, 1)
	evs = must(t, &s, StartStep{Machine: u, Step: StepReboot, Attempt: 1, InstructionID: id}, t0)
	if e := evs[0].(StepStarted); e.InstructionID != id || e.Kind != KindReboot || !e.Deadline.Equal(t0.Add(15*time.Minute)) {
		t.Errorf("%+v", e)
	}
	// A second start of a running step is refused: no second instruction.
	if _, err := Decide(s, StartStep{Machine: u, Step: StepReboot, Attempt: 2, InstructionID: "other"}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("second reboot: %v", err)
	}
	must(t, &s, FailStep{Machine: u, Step: StepReboot, Attempt: 1, Reason: "not accepted", TimedOut: true}, t0.Add(15*time.Minute))
	must(t, &s, Retry{}, t0.Add(20*time.Minute))
	if _, err := Decide(s, StartStep{Machine: u, Step: StepReboot, Attempt: 2, InstructionID: id}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("reused id: %v", err)
	}
	t1 := t0.Add(21 * time.Minute)
	must(t, &s, StartStep{Machine: u, Step: StepReboot, Attempt: 2, InstructionID: InstructionID("r1", u, 2)}, t1)
	must(t, &s, SucceedStep{Machine: u, Step: StepReboot, Attempt: 2}, t1)
	// wait_boot and wait_ready share the node-ready timeout.
	evs = must(t, &s, StartStep{Machine: u, Step: StepWaitBoot, Attempt: 1}, t1)
	if e := evs[0].(StepStarted); !e.Deadline.Equal(t1.Add(2 * time.Hour)) {
		t.Errorf("wait_boot deadline %s", e.Deadline)
	}
	t2 := t1.Add(90 * time.Minute)
	must(t, &s, SucceedStep{Machine: u, Step: StepWaitBoot, Attempt: 1}, t2)
	evs = must(t, &s, StartStep{Machine: u, Step: StepWaitReady, Attempt: 1}, t2)
	if e := evs[0].(StepStarted); !e.Deadline.Equal(t1.Add(2 * time.Hour)) {
		t.Errorf("wait_ready deadline %s, want the shared %s", e.Deadline, t1.Add(2*time.Hour))
	}
	m, _ := s.Machine(u)
	if m.Instructions[0] != id || len(m.Instructions) != 2 || !m.Rebooted {
		t.Errorf("%+v", m)
	}
}

func TestWaitReadyMinimumWindow(t *testing.T) {
	s := running(t, 1, "1")
	u := uuidOf(1)
	walk(t, &s, 1, StepWaitBoot, t0)
	late := t0.Add(2*time.Hour - time.Second)
	must(t, &s, SucceedStep{Machine: u, Step: StepWaitBoot, Attempt: 1}, late)
	evs := must(t, &s, StartStep{Machine: u, Step: StepWaitReady, Attempt: 1}, late)
	if e := evs[0].(StepStarted); !e.Deadline.Equal(late.Add(MinReadyWindow)) {
		t.Errorf("%s", e.Deadline)
	}
}

func TestDrainBlockedThrottle(t *testing.T) {
	s := running(t, 1, "1")
	u := uuidOf(1)
	walk(t, &s, 1, StepDrain, t0)
	c := RecordDrainBlocked{Machine: u, Attempt: 1, Pod: "shop/cart-0", Budget: "shop/cart", WaitedFor: 10 * time.Second}
	if evs := must(t, &s, c, t0.Add(10*time.Second)); len(evs) != 1 {
		t.Fatal(evs)
	}
	c.WaitedFor = 40 * time.Second
	if evs := must(t, &s, c, t0.Add(40*time.Second)); len(evs) != 0 {
		t.Fatalf("same block within a minute must be a no-op: %v", evs)
	}
	c.Pod = "shop/cart-1"
	if evs := must(t, &s, c, t0.Add(41*time.Second)); len(evs) != 1 {
		t.Fatal("another pod is news")
	}
	c.WaitedFor = 2 * time.Minute
	if evs := must(t, &s, c, t0.Add(2*time.Minute)); len(evs) != 1 {
		t.Fatal("a minute later it is logged again")
	}
	m, _ := s.Machine(u)
	if m.Blocked == nil || m.Blocked.WaitedFor != values.Duration(2*time.Minute) {
		t.Errorf("%+v", m.Blocked)
	}
	if _, err := Decide(s, RecordDrainBlocked{Machine: u, Attempt: 1}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("%v", err)
	}
	if _, err := Decide(s, RecordDrainBlocked{Machine: u, Attempt: 2, Pod: "a/b", Budget: "a/c"}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("%v", err)
	}
}

func TestChecksAndDependency(t *testing.T) {
	var s State
	st := fxStart(1, "1")
	st.After = "r0"
	must(t, &s, st, t0)
	if _, err := Decide(s, RecordChecks{Results: passing()}, t0); !strings.Contains(fmt.Sprint(err), "the checks run once rollout r0 succeeded") {
		t.Errorf("%v", err)
	}
	if _, err := Decide(s, ResolveDependency{Rollout: "r0", Outcome: StatusFailed}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("%v", err)
	}
	if _, err := Decide(s, ResolveDependency{Rollout: "rX", Outcome: StatusSucceeded}, t0); errs.KindOf(err) != errs.KindValidation {
		t.Errorf("%v", err)
	}
	must(t, &s, ResolveDependency{Rollout: "r0", Outcome: StatusSucceeded}, t0)
	if evs := must(t, &s, ResolveDependency{Rollout: "r0", Outcome: StatusSucceeded}, t0); len(evs) != 0 {
		t.Error("repeat must be a no-op")
	}
	_, err := Decide(s, RecordChecks{Results: passing()[:3]}, t0)
	if errs.KindOf(err) != errs.KindValidation || !strings.Contains(err.Error(), "check machines_healthy is missing") || !strings.Contains(err.Error(), "check capacity is missing") {
		t.Errorf("%v", err)
	}
	rs := passing()
	rs[0] = CheckResult{Name: CheckClusterReachable}
	rs = append(rs, CheckResult{Name: "vibes", Passed: true})
	_, err = Decide(s, RecordChecks{Results: rs}, t0)
	if f := errs.As(err).Fields; len(f) != 2 || f[0].Field != "results[0].reason" || f[1].Field != "results[5].name" {
		t.Errorf("%v", err)
	}
	rs = passing()
	rs[2] = CheckResult{Name: CheckExclusive, Reason: "rollout r7 holds m01"}
	evs := must(t, &s, RecordChecks{Results: rs}, t0)
	if got := types(evs); !slices.Equal(got, []string{"rollout.checks_recorded", "rollout.failed"}) {
		t.Fatalf("%v", got)
	}
	if s.Status() != StatusFailed || s.Reason != "sanity checks failed, nothing was touched: exclusive: rollout r7 holds m01" {
		t.Errorf("%s %q", s.Status(), s.Reason)
	}
	if _, err := Decide(s, RecordChecks{Results: passing()}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("%v", err)
	}
	must(t, &s, Retry{}, t0)
	if s.Status() != StatusPending || s.Checks != nil {
		t.Errorf("retry must run the checks again: %s %v", s.Status(), s.Checks)
	}
	must(t, &s, RecordChecks{Results: passing()}, t0)
	if s.Status() != StatusRunning {
		t.Error(s.Status())
	}
}

func TestEmptyRolloutSucceedsAfterChecks(t *testing.T) {
	var s State
	st := fxStart(0, "1")
	st.Excluded = []Exclusion{{UUID: uuidOf(1), Hostname: "m01", Reason: "in maintenance"}}
	must(t, &s, st, t0)
	evs := must(t, &s, RecordChecks{Results: passing()}, t0)
	if got := types(evs); !slices.Equal(got, []string{"rollout.checks_recorded", "rollout.succeeded"}) {
		t.Fatalf("%v", got)
	}
}

// TestAbortSemantics: which machines the abort uncordons, which finish,
// which are left cordoned.
func TestAbortSemantics(t *testing.T) {
	s := running(t, 8, "8")
	walk(t, &s, 1, StepCordon, t0)   // cordon running
	walk(t, &s, 2, StepDrain, t0)    // drain running
	walk(t, &s, 3, StepReboot, t0)   // reboot running (instruction out)
	walk(t, &s, 4, StepWaitBoot, t0) // rebooted
	walk(t, &s, 5, StepDrain, t0)
	walk(t, &s, 6, StepWaitReady, t0)
	walk(t, &s, 7, StepUncordon, t0)
	must(t, &s, FailStep{Machine: uuidOf(5), Step: StepDrain, Attempt: 1, Reason: "PDB", TimedOut: true}, t0) // failed before reboot
	must(t, &s, FailStep{Machine: uuidOf(6), Step: StepWaitReady, Attempt: 1, Reason: "NotReady"}, t0)        // failed after reboot
	must(t, &s, FailStep{Machine: uuidOf(7), Step: StepUncordon, Attempt: 1, Reason: "API down"}, t0)         // Ready, uncordon failed
	// m08 never began
	must(t, &s, Abort{By: "ops"}, t0)
	want := map[int]Move{
		1: {}, // running cordon: cancelled first (by the planner), then released
		2: {},
		3: {}, // the reboot's fate is asked of the boot service first
		4: {}, // wait_boot runs on
		5: {Start: StepUncordon, Attempt: 1, Release: true},
		6: {}, // rebooted, not Ready: left cordoned
		7: {Start: StepUncordon, Attempt: 2, Release: true},
		8: {},
	}
	for i := 1; i <= 8; i++ {
		m, _ := s.Machine(uuidOf(i))
		if got := s.MoveFor(m); got != want[i] {
			t.Errorf("m%02d: %+v, want %+v", i, got, want[i])
		}
	}
	if _, err := Decide(s, CancelStep{Machine: uuidOf(4), Step: StepWaitBoot, Attempt: 1}, t0); !strings.Contains(fmt.Sprint(err), "the machine finishes its steps") {
		t.Errorf("%v", err)
	}
	must(t, &s, CancelStep{Machine: uuidOf(1), Step: StepCordon, Attempt: 1}, t0)
	m1, _ := s.Machine(uuidOf(1))
	if mv := s.MoveFor(m1); mv != (Move{Start: StepUncordon, Attempt: 1, Release: true}) {
		t.Errorf("cancelled cordon: %+v (the node may be cordoned: uncordon it)", mv)
	}
	if o, _ := s.Finishing(); o != "" {
		t.Fatal("cannot finish while machines move")
	}
	if _, err := Decide(s, Finish{}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("%v", err)
	}
	if _, err := Decide(s, Retry{}, t0); errs.KindOf(err) != errs.KindConflict {
		t.Errorf("retry while aborting: %v", err)
	}
}

func TestApplyIsTotal(t *testing.T) {
	var s State
	s.Apply(nil)
	s.Apply((*Started)(nil))
	s.Apply(MachineBegun{Machine: uuidOf(1)})
	s.Apply("garbage")
	if s.Exists() {
		t.Fatal("events before Started must be ignored")
	}
	st := fxStart(2, "1")
	evs, _ := Decide(State{}, st, t0)
	e := evs[0].(Started)
	s.Apply(&e) // by pointer
	if !s.Exists() || len(s.Machines) != 2 {
		t.Fatal(s)
	}
	before := s.Clone()
	for _, junk := range []any{
		Started{ID: "other"}, MachineBegun{Machine: "nope"}, StepStarted{Machine: uuidOf(1), Step: StepDrain, Attempt: 1},
		StepSucceeded{Machine: uuidOf(1), Step: StepCordon, Attempt: 1}, StepFailed{Machine: uuidOf(2), Step: StepCordon},
		MachineDone{Machine: uuidOf(1)}, DrainBlocked{Machine: uuidOf(1)}, DependencyResolved{Rollout: "x"}, 42,
	} {
		s.Apply(junk)
	}
	if !reflect.DeepEqual(before, s) {
		t.Errorf("events that do not match the state must be ignored")
	}
	// Duplicates are harmless.
	s.Apply(MachineBegun{Machine: uuidOf(1), At: t0})
	ss := StepStarted{Machine: uuidOf(1), Step: StepCordon, Attempt: 1, Deadline: t0.Add(time.Minute), At: t0}
	s.Apply(ss)
	once := s.Clone()
	s.Apply(MachineBegun{Machine: uuidOf(1), At: t0.Add(time.Hour)})
	s.Apply(ss)
	if !reflect.DeepEqual(once, s) {
		t.Error("duplicate events changed the state")
	}
}

func TestEventsRoundTripJSON(t *testing.T) {
	s := running(t, 3, "50%")
	var all []any
	record := func(evs []any) { all = append(all, evs...) }
	var fresh State
	evs, _ := Decide(fresh, Start{ID: "r1", Pool: "workers", Revision: 2, Machines: fxMachines(3), Strategy: Strategy{PoolSettings: PoolSettings{
		MaxUnavailable: "50%", Pause: values.Duration(time.Minute), DrainGracePeriod: ptr(values.Duration(30 * time.Second)),
		MaintenanceWindows: []values.Window{{Days: []string{"mon"}, Start: "08:00", End: "12:00", TimeZone: "Europe/Zurich"}},
	}}}, t0)
	record(evs)
	for _, e := range evs {
		fresh.Apply(e)
	}
	record(must(t, &fresh, RecordChecks{Results: passing()}, t0))
	walk(t, &fresh, 1, StepDrain, t0)
	record(must(t, &fresh, RecordDrainBlocked{Machine: uuidOf(1), Attempt: 1, Pod: "a/b", Budget: "a/c", WaitedFor: time.Minute}, t0))
	record(must(t, &fresh, Abort{By: "x"}, t0))
	_ = s
	names := map[string]bool{}
	for _, z := range EventTypes() {
		n := z.(interface{ EventType() string }).EventType()
		if names[n] || !strings.HasPrefix(n, "rollout.") || n == "rollout.reboot_requested" || n == "rollout.instruction_withdrawn" {
			t.Errorf("event type %q duplicated or clashing with the boot service's", n)
		}
		names[n] = true
	}
	var a, b State
	for _, e := range all {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		ptr := reflect.New(reflect.TypeOf(e))
		if err := json.Unmarshal(raw, ptr.Interface()); err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		a.Apply(e)
		b.Apply(ptr.Interface())
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("state from decoded events differs:\n%s\n%s", ja, jb)
	}
}

func ptr[T any](v T) *T { return &v }

func TestInstructionID(t *testing.T) {
	a, b, c := InstructionID("r1", uuidOf(1), 1), InstructionID("r1", uuidOf(1), 2), InstructionID("r2", uuidOf(1), 1)
	if a == b || a == c || !instrRE.MatchString(a) || len(a) != 35 || a != InstructionID("r1", uuidOf(1), 1) {
		t.Errorf("%s %s %s", a, b, c)
	}
}

func TestNextWindowOpen(t *testing.T) {
	s := State{Strategy: Strategy{PoolSettings: PoolSettings{MaintenanceWindows: []values.Window{
		{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"},
		{Days: []string{"wed"}, Start: "12:00", End: "13:00", TimeZone: "America/New_York"},
	}}}}
	for _, tc := range []struct{ now, want time.Time }{
		// Monday: more than an hour to any window → an hour ahead.
		{t0, t0.Add(time.Hour)},
		// Wednesday 15:30 UTC → 16:00 UTC is noon in New York (EDT).
		{time.Date(2025, 6, 4, 15, 30, 0, 0, time.UTC), time.Date(2025, 6, 4, 16, 0, 0, 0, time.UTC)},
		// Saturday 19:45 UTC → 20:00 UTC is 22:00 in Zurich (CEST).
		{time.Date(2025, 6, 7, 19, 45, 0, 0, time.UTC), time.Date(2025, 6, 7, 20, 0, 0, 0, time.UTC)},
		// In winter Zurich is UTC+1.
		{time.Date(2025, 12, 6, 20, 30, 0, 0, time.UTC), time.Date(2025, 12, 6, 21, 0, 0, 0, time.UTC)},
	} {
		if got := s.NextWindowOpen(tc.now); !got.Equal(tc.want) {
			t.Errorf("at %s: %s, want %s", tc.now, got, tc.want)
		}
		if !s.InWindow(tc.want) && tc.want.Sub(tc.now) < time.Hour {
			t.Errorf("the window is not open at %s", tc.want)
		}
	}
	if got := (&State{}).NextWindowOpen(t0); !got.IsZero() {
		t.Errorf("no windows: %s", got)
	}
}

func TestStateSurvivesJSON(t *testing.T) {
	s := running(t, 2, "1")
	walk(t, &s, 1, StepDrain, t0)
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	m, ok := back.Machine(uuidOf(1))
	if !ok || m.Step != StepDrain {
		t.Fatalf("%v %+v", ok, m)
	}
	if _, err := Decide(back, SucceedStep{Machine: uuidOf(1), Step: StepDrain, Attempt: 1}, t0); err != nil {
		t.Fatal(err)
	}
}
