package rollout

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// checkTally fails t when the tally Apply kept differs from one counted
// afresh, or its bounds leave out a machine that is out.
func checkTally(t *testing.T, s *State) {
	t.Helper()
	if !s.tally.kept {
		return
	}
	fresh := newTally(s.Machines)
	got := s.tally
	if got.phases != fresh.phases || got.remediating != fresh.remediating || got.firstWaiting != fresh.firstWaiting || got.firstLive != fresh.firstLive {
		t.Fatalf("tally %+v, counted afresh %+v", got, fresh)
	}
	lo, hi := s.Live()
	for i := range s.Machines {
		if s.Machines[i].Phase.Out() && (i < lo || i >= hi) {
			t.Fatalf("machine %d is %s, outside the live bounds [%d, %d)", i, s.Machines[i].Phase, lo, hi)
		}
	}
}

// TestTallyAndReversal drives rollouts at random (failures, retries,
// remediations, aborts) and checks after every event that the tally
// matches the machines, that Decide's shortcut for the finish event agrees
// with deciding on a copy, and that reverting a reversible apply gives
// back the state as it was.
func TestTallyAndReversal(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 1 + r.IntN(12)
		start := fxStart(n, []string{"1", "2", "30%", "100%"}[r.IntN(4)])
		start.Strategy.RemediationMaxInFlight = r.IntN(3)
		for i := range start.Machines {
			start.Machines[i].ControlPlane = i < r.IntN(3)
			start.Machines[i].NoNode = r.IntN(5) == 0
		}
		var s State
		now := t0
		must(t, &s, start, now)
		must(t, &s, RecordChecks{Results: passing()}, now)
		for round := 0; round < 2000 && !s.Status().Final(); round++ {
			now = now.Add(time.Duration(r.IntN(90)) * time.Second)
			var cmds []Command
			if uuids, _ := s.BeginCandidates(now); len(uuids) > 0 {
				cmds = append(cmds, BeginMachine{Machine: uuids[0]})
			}
			for i := range s.Machines {
				m := &s.Machines[i]
				if m.Phase == PhaseActive && m.StepStatus == StepStatusRunning {
					cmds = append(cmds, SucceedStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt},
						FailStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt, Reason: "boom", TimedOut: r.IntN(2) == 0})
					if s.Aborting {
						cmds = append(cmds, CancelStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt})
					}
					continue
				}
				mv := s.MoveFor(m)
				switch {
				case mv.Start != "":
					c := StartStep{Machine: m.UUID, Step: mv.Start, Attempt: mv.Attempt}
					if mv.Start == StepReboot {
						c.InstructionID = InstructionID(s.ID, m.UUID, mv.Attempt)
					}
					cmds = append(cmds, c)
				case mv.Finish != "":
					cmds = append(cmds, CompleteMachine{Machine: m.UUID})
				}
			}
			for _, u := range s.RemediationCandidates() {
				cmds = append(cmds, Remediate{Machine: u})
			}
			cmds = append(cmds, Finish{})
			if r.IntN(20) == 0 {
				cmds = append(cmds, Retry{}, Pause{}, Resume{})
			}
			if r.IntN(400) == 0 {
				cmds = append(cmds, Abort{})
			}
			c := cmds[r.IntN(len(cmds))]
			// Successes are likelier than failures, or no rollout would
			// get far.
			if _, fail := c.(FailStep); fail && r.IntN(6) != 0 {
				continue
			}
			before := s.Clone()
			evs, err := Decide(s, c, now)
			if err != nil || len(evs) == 0 {
				continue
			}
			if !reflect.DeepEqual(before, s) {
				t.Fatalf("seed %d: %s mutated the state", seed, c.CommandType())
			}
			var rs []Reversal
			for _, e := range evs {
				rs = append(rs, s.ApplyReversibly(e))
				checkTally(t, &s)
			}
			if _, finish := c.(Finish); !finish {
				// What Decide would have appended had it always copied.
				after := before.Clone()
				for _, e := range evs[:len(evs)-boolInt(isFinish(evs[len(evs)-1]))] {
					after.Apply(e)
				}
				if want, got := len(finishEvents(&after, now)) > 0, isFinish(evs[len(evs)-1]); want != got {
					t.Fatalf("seed %d: %s: finish event %v, deciding on a copy says %v", seed, c.CommandType(), got, want)
				}
			}
			if r.IntN(4) == 0 {
				after := s.Clone()
				for i := len(rs) - 1; i >= 0; i-- {
					s.Revert(rs[i])
				}
				if !reflect.DeepEqual(before, s) {
					t.Fatalf("seed %d: reverting %s did not give the state back", seed, c.CommandType())
				}
				s = after
			}
		}
	}
}

func isFinish(e any) bool {
	switch e.(type) {
	case Succeeded, Failed, Aborted:
		return true
	}
	return false
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
