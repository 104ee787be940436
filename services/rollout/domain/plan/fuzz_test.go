package plan

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// bytesource turns fuzz input into choices; it yields zeros once spent.
type bytesource struct {
	data []byte
	i    int
}

func (b *bytesource) more() bool { return b.i < len(b.data) }

func (b *bytesource) n(k int) int {
	if k <= 0 || b.i >= len(b.data) {
		return 0
	}
	v := int(b.data[b.i])
	b.i++
	return v % k
}

// FuzzPlanner builds random histories out of legal commands: the
// planner's own proposals, reports of outcomes (true or not) for running
// steps, operator commands, checks and dependencies, and time passing. On
// every state it checks the invariants: no more than maxUnavailable out,
// one control-plane machine at a time, machines begin and disruptive steps
// start only in a window and only after the checks passed, reboot
// instructions are never reused, Next is deterministic and every command
// it proposes is accepted, Decide never mutates its state and refuses only
// with typed errors, and the fold of the log equals the state in memory.
func FuzzPlanner(f *testing.F) {
	f.Add([]byte{3, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{5, 2, 1, 1, 2, 3, 1, 1, 2, 0, 1, 1, 2, 1, 1, 3, 0, 1, 9, 1, 1, 1, 10, 1, 1, 11, 1, 1})
	f.Add([]byte{6, 0, 2, 1, 0, 4, 1, 1, 1, 0, 200, 1, 0, 255, 1, 0, 255, 1, 1, 8, 1, 1, 1, 1})
	f.Add([]byte{2, 3, 3, 0, 1, 1, 1, 6, 1, 1, 1, 7, 1, 1, 1, 1, 1, 1, 5, 0, 1, 1, 1, 1})
	f.Add([]byte{4, 1, 4, 1, 1, 12, 1, 13, 0, 1, 1, 1, 1, 1, 1, 2, 0, 0, 1, 1, 9, 1, 1, 1, 1, 1, 3, 1, 1, 1})
	f.Add([]byte("a longer seed that exercises several commands in a row, abort and retry!"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &bytesource{data: data}
		fuzzHistory(t, src)
	})
}

// TestPlannerRandomHistories runs the fuzz body on many pseudo-random
// inputs, so that plain `go test` covers far more than the seeds.
func TestPlannerRandomHistories(t *testing.T) {
	n := 3000
	if testing.Short() || raceEnabled {
		n = 500
	}
	state := uint64(88172645463325252)
	for range n {
		data := make([]byte, 40+int(state%200))
		for i := range data {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			data[i] = byte(state)
		}
		fuzzHistory(t, &bytesource{data: data})
	}
}

func fuzzHistory(t *testing.T, src *bytesource) {
	size := 1 + src.n(6)
	ms := make([]rollout.Machine, size)
	for i := range ms {
		ms[i] = rollout.Machine{UUID: uuidOf(i + 1), Hostname: fmt.Sprintf("m%d", i+1), CurrentRevision: uint64(src.n(3)),
			ControlPlane: src.n(4) == 0, UpgradeIndex: src.n(3), NoNode: src.n(5) == 0}
	}
	start := rollout.Start{ID: "fz", Pool: "p", Revision: 2, Machines: ms, PoolSize: size + src.n(3),
		Strategy: rollout.Strategy{PoolSettings: rollout.PoolSettings{
			MaxUnavailable: values.IntOrPercent([]string{"1", "2", "0", "50%", "100%", "33%"}[src.n(6)]),
			Pause:          values.Duration(time.Duration(src.n(3)) * 5 * time.Minute),
		}}}
	if src.n(3) == 0 {
		start.Strategy.MaintenanceWindows = []values.Window{{Days: []string{"mon", "tue", "thu"}, Start: "09:10", End: "10:00", TimeZone: "Europe/Zurich"}}
	}
	if src.n(4) == 0 {
		start.After = "before"
	}
	now := t0
	var log []any
	var s rollout.State
	add := func(evs []any) {
		for _, e := range evs {
			log = append(log, e)
			s.Apply(e)
			checkEvent(t, &s, e)
		}
	}
	evs, err := rollout.Decide(s, start, now)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	add(evs)

	decide := func(c rollout.Command, mustAccept bool) bool {
		before := s.Clone()
		evs, err := rollout.Decide(s, c, now)
		if !reflect.DeepEqual(before, s) {
			t.Fatalf("%s mutated the state", c.CommandType())
		}
		if err != nil {
			switch errs.KindOf(err) {
			case errs.KindConflict, errs.KindValidation, errs.KindNotFound:
			default:
				t.Fatalf("%s: %v", c.CommandType(), err)
			}
			if mustAccept {
				t.Fatalf("the planner proposed %s %+v, refused: %v", c.CommandType(), c, err)
			}
			return false
		}
		add(evs)
		return true
	}
	// a running step, chosen by the input
	pick := func() *rollout.MachineState {
		var rs []*rollout.MachineState
		for i := range s.Machines {
			if m := &s.Machines[i]; m.Phase == rollout.PhaseActive && m.StepStatus == rollout.StepStatusRunning {
				rs = append(rs, m)
			}
		}
		if len(rs) == 0 {
			return nil
		}
		return rs[src.n(len(rs))]
	}

	for steps := 0; src.more() && steps < 400; steps++ {
		switch op := src.n(20); op {
		case 0, 1:
			now = now.Add(time.Duration(src.n(256)) * time.Minute)
		case 19:
			now = now.Add(time.Duration(1+src.n(10)) * time.Minute)
		case 2, 3, 4: // follow the plan
			d := Next(s, now)
			checkPlan(t, &s, d, now)
			for _, c := range d.Commands {
				decide(c, true)
			}
		case 5, 6, 7: // follow the plan, and the world does what it is asked
			d := Next(s, now)
			checkPlan(t, &s, d, now)
			for _, c := range d.Commands {
				decide(c, true)
			}
			for _, a := range d.Actions {
				switch a.Kind {
				case RunChecks:
					decide(rollout.RecordChecks{Results: passing()}, false)
				case WaitForRollout:
					decide(rollout.ResolveDependency{Rollout: a.Rollout, Outcome: rollout.StatusSucceeded}, false)
				case ConfirmReboot:
					decide(rollout.SucceedStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt}, false)
				default:
					if src.n(3) > 0 {
						decide(rollout.SucceedStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt}, false)
					}
				}
			}
		case 8, 9:
			if m := pick(); m != nil {
				decide(rollout.SucceedStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt}, false)
			}
		case 10:
			if m := pick(); m != nil {
				decide(rollout.FailStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt, Reason: "fuzz", TimedOut: src.n(2) == 0}, false)
			}
		case 11:
			if m := pick(); m != nil {
				decide(rollout.CancelStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt}, false)
			}
		case 12:
			if m := pick(); m != nil {
				decide(rollout.RecordDrainBlocked{Machine: m.UUID, Attempt: m.Attempt, Pod: "a/p", Budget: "a/b", WaitedFor: time.Minute}, false)
			}
		case 13:
			if src.n(3) == 0 {
				decide(rollout.Pause{}, false)
			}
		case 14:
			decide(rollout.Resume{}, false)
		case 15:
			if src.n(3) == 0 {
				decide(rollout.Abort{}, false)
			}
		case 16:
			decide(rollout.Retry{}, false)
		case 17:
			rs := passing()
			if src.n(4) == 0 {
				rs[src.n(len(rs))] = rollout.CheckResult{Name: rollout.CheckCapacity, Reason: "fuzz"}
			}
			decide(rollout.RecordChecks{Results: rs}, false)
		case 18:
			decide(rollout.ResolveDependency{Rollout: "before", Outcome: []rollout.Status{rollout.StatusSucceeded, rollout.StatusAborted}[src.n(4)/3]}, false)
		}
		checkState(t, &s, log)
	}
	// Whatever happened, honest reports and the plan wind the rollout down
	// (abort) without ever breaking the invariants, and nothing stays
	// cordoned without the report saying so.
	if !s.Status().Final() {
		decide(rollout.Abort{}, false)
		for range 200 {
			d := Next(s, now)
			checkPlan(t, &s, d, now)
			if d.Final {
				break
			}
			for _, c := range d.Commands {
				decide(c, true)
			}
			for _, a := range d.Actions {
				switch a.Kind {
				case ConfirmReboot:
					decide(rollout.CancelStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt}, false)
				case WaitForRollout, RunChecks:
				default:
					decide(rollout.SucceedStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt}, false)
				}
			}
			checkState(t, &s, log)
			now = now.Add(time.Minute)
		}
		if s.Status() != rollout.StatusAborted {
			t.Fatalf("the abort did not wind down: %s %+v", s.Status(), Next(s, now))
		}
		for _, r := range s.Report() {
			switch r.Outcome {
			case rollout.OutcomeDone, rollout.OutcomeReleased:
				if r.Node != rollout.NodeUncordoned && r.Node != rollout.NodeUntouched {
					t.Fatalf("%s %s but node %s", r.Hostname, r.Outcome, r.Node)
				}
			case rollout.OutcomeNotStarted:
				if r.Node != rollout.NodeUntouched {
					t.Fatalf("%+v", r)
				}
			case rollout.OutcomeFailed:
				if !r.Rebooted && (r.Node == rollout.NodeCordoned || r.Node == rollout.NodeMaybeCordoned) {
					m, _ := s.Machine(r.UUID)
					if !m.ReleaseAttempted {
						t.Fatalf("%s never rebooted and was left cordoned without a release attempt", r.Hostname)
					}
				}
			default:
				t.Fatalf("%+v", r)
			}
		}
	}
}

// checkEvent checks one event as it is appended.
func checkEvent(t *testing.T, s *rollout.State, e any) {
	t.Helper()
	switch e := e.(type) {
	case rollout.MachineBegun:
		if !s.InWindow(e.At) {
			t.Fatalf("a machine began outside a window at %s", e.At)
		}
		if !s.Cleared() {
			t.Fatal("a machine began before the checks passed")
		}
	case rollout.StepStarted:
		if e.Step.Disruptive() && !s.InWindow(e.At) {
			t.Fatalf("%s started outside a window at %s", e.Step, e.At)
		}
		if e.Step == rollout.StepReboot {
			m, _ := s.Machine(e.Machine)
			if n := len(m.Instructions); slices.Index(m.Instructions, e.InstructionID) != n-1 {
				t.Fatalf("instruction %s reused: %v", e.InstructionID, m.Instructions)
			}
		}
	}
}

func checkState(t *testing.T, s *rollout.State, log []any) {
	t.Helper()
	if out, b := s.Out(), s.Budget(); out > b {
		t.Fatalf("%d out, budget %d", out, b)
	}
	cp := 0
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.ControlPlane && m.Phase.Out() {
			cp++
		}
		if !m.ControlPlane && m.Phase.Out() {
			for j := range s.Machines {
				if c := &s.Machines[j]; c.ControlPlane && c.Phase == rollout.PhaseWaiting {
					t.Fatalf("worker %s out before control-plane machine %s began", m.Hostname, c.Hostname)
				}
			}
		}
		if m.Phase == rollout.PhaseDone && (!m.Rebooted || !m.Ready || m.Node != rollout.NodeUncordoned) {
			t.Fatalf("%s done but %+v", m.Hostname, m)
		}
		if m.Phase == rollout.PhaseReleased && m.Rebooted && !m.Ready {
			t.Fatalf("%s released after a reboot, before it was Ready", m.Hostname)
		}
	}
	if cp > 1 {
		t.Fatalf("%d control-plane machines out", cp)
	}
	if got := fold(log); !reflect.DeepEqual(got.Clone(), s.Clone()) {
		t.Fatalf("fold differs from the state in memory")
	}
}

func checkPlan(t *testing.T, s *rollout.State, d Decision, now time.Time) {
	t.Helper()
	if again := Next(s.Clone(), now); !reflect.DeepEqual(again, d) {
		t.Fatalf("Next is not deterministic")
	}
	for _, a := range d.Actions {
		if a.Machine == "" {
			continue
		}
		m, _ := s.Machine(a.Machine)
		if m.StepStatus != rollout.StepStatusRunning || m.Step != a.Step || m.Attempt != a.Attempt {
			t.Fatalf("action %s for a step the log does not record as running: %+v", a, m)
		}
		if (a.Kind == IssueReboot || a.Kind == ConfirmReboot) && a.InstructionID != m.InstructionID {
			t.Fatalf("reboot re-driven with %s, the log says %s", a.InstructionID, m.InstructionID)
		}
	}
	if d.Final != s.Status().Final() {
		t.Fatalf("final %v, status %s", d.Final, s.Status())
	}
}
