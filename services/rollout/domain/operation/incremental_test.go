package operation

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// TestIncrementalRows checks that the rows and the progress the view
// updates for the machines an event changes are the ones rebuilding every
// row gives, over rollouts driven at random (failures, retries, aborts).
func TestIncrementalRows(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		var ms []rollout.Machine
		for i := 1; i <= 2+r.IntN(8); i++ {
			ms = append(ms, rollout.Machine{UUID: uuidOf(i), Hostname: "m" + string(rune('a'+i)), CurrentRevision: 1})
		}
		var v View
		now := t0
		apply := func(c rollout.Command) {
			evs, err := rollout.Decide(v.state, c, now)
			if err != nil {
				return
			}
			for _, e := range evs {
				v.Apply(e)
				full := v
				full.Machines = slices.Clone(v.Machines)
				full.refresh()
				if !reflect.DeepEqual(full.Machines, v.Machines) || full.Progress != v.Progress {
					t.Fatalf("seed %d, after %T: rows %+v %+v, rebuilt %+v %+v", seed, e, v.Progress, v.Machines, full.Progress, full.Machines)
				}
			}
		}
		apply(rollout.Start{ID: "r1", Pool: "workers", Revision: 2, Machines: ms,
			Strategy: rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "50%"}}})
		var results []rollout.CheckResult
		for _, n := range rollout.RequiredChecks {
			results = append(results, rollout.CheckResult{Name: n, Passed: true})
		}
		apply(rollout.RecordChecks{Results: results})
		for round := 0; round < 300 && !v.Over(); round++ {
			now = now.Add(time.Second)
			s := &v.state
			var cmds []rollout.Command
			if uuids, _ := s.BeginCandidates(now); len(uuids) > 0 {
				cmds = append(cmds, rollout.BeginMachine{Machine: uuids[0]})
			}
			for i := range s.Machines {
				m := &s.Machines[i]
				if m.Phase == rollout.PhaseActive && m.StepStatus == rollout.StepStatusRunning {
					cmds = append(cmds, rollout.SucceedStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt})
					if r.IntN(8) == 0 {
						cmds = append(cmds, rollout.FailStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt, Reason: "boom"})
					}
					continue
				}
				if mv := s.MoveFor(m); mv.Start != "" {
					c := rollout.StartStep{Machine: m.UUID, Step: mv.Start, Attempt: mv.Attempt}
					if mv.Start == rollout.StepReboot {
						c.InstructionID = rollout.InstructionID(s.ID, m.UUID, mv.Attempt)
					}
					cmds = append(cmds, c)
				} else if mv.Finish != "" {
					cmds = append(cmds, rollout.CompleteMachine{Machine: m.UUID})
				}
			}
			cmds = append(cmds, rollout.Finish{}, rollout.Retry{})
			if r.IntN(100) == 0 {
				cmds = append(cmds, rollout.Abort{})
			}
			apply(cmds[r.IntN(len(cmds))])
		}
	}
}
