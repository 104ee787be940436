package operation_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// t0 is a Monday, 09:00 UTC.
var t0 = time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC)

func passing() []rollout.CheckResult {
	var rs []rollout.CheckResult
	for _, n := range rollout.RequiredChecks {
		rs = append(rs, rollout.CheckResult{Name: n, Passed: true})
	}
	return rs
}

func startedRollout(t *testing.T, windows []values.Window) rollout.State {
	t.Helper()
	var ms []rollout.Machine
	for i, h := range []string{"m01", "m02", "m03"} {
		ms = append(ms, rollout.Machine{UUID: uuid(i + 1), Hostname: h, CurrentRevision: 1})
	}
	start := rollout.Start{ID: "ro-1", Pool: "workers", Cluster: "prod", Revision: 2, Machines: ms,
		Strategy: rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "1", MaintenanceWindows: windows}}}
	evs, err := rollout.Decide(rollout.State{}, start, t0)
	if err != nil {
		t.Fatal(err)
	}
	var s rollout.State
	for _, e := range evs {
		s.Apply(e)
	}
	s.Apply(rollout.ChecksRecorded{Results: passing(), At: t0})
	return s
}

func uuid(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i) }

func waiting(now time.Time) func(rollout.State) []rollout.Block {
	return func(s rollout.State) []rollout.Block { return plan.Next(s, now).Waiting }
}

func TestConditionsSayWhyARolloutWaits(t *testing.T) {
	// A window every day at 22:00 UTC: at 09:00 the rollout waits for it.
	s := startedRollout(t, []values.Window{{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, Start: "22:00", End: "23:00", TimeZone: "UTC"}})
	now := t0.Add(time.Minute)
	conds, last, eta := operation.Explain(s, plan.Next(s, now).Waiting, now)
	if len(conds) != 1 || conds[0].Type != operation.ConditionProgressing || conds[0].Status != "False" || conds[0].Reason != "OutsideMaintenanceWindow" {
		t.Fatalf("outside the window: %+v", conds)
	}
	opens := time.Date(2025, 6, 2, 22, 0, 0, 0, time.UTC)
	if !conds[0].Until.Equal(opens) || !strings.Contains(conds[0].Message, opens.Format(time.RFC3339)) {
		t.Fatalf("the condition must say when the window opens (%s): %+v", opens, conds[0])
	}
	if !last.Equal(t0) || !eta.IsZero() {
		t.Fatalf("last progress %s (want the start), estimate %s (want none before a machine is done)", last, eta)
	}

	// Paused by an operator: that is the reason, whatever else holds.
	p := startedRollout(t, nil)
	p.Apply(rollout.Paused{By: "token:t1", Reason: "change freeze", At: t0})
	conds, _, _ = operation.Explain(p, plan.Next(p, now).Waiting, now)
	if conds[0].Reason != "Paused" {
		t.Fatalf("paused: %+v", conds)
	}
}

func TestConditionsNameTheBlockingBudgetAndEstimate(t *testing.T) {
	s := startedRollout(t, nil)
	// m01 went through, m02 drains and is blocked by a budget.
	at := t0
	step := func(m string, st rollout.Step, ok bool) {
		at = at.Add(time.Minute)
		s.Apply(rollout.StepStarted{Machine: m, Step: st, Attempt: 1, Deadline: at.Add(time.Hour), At: at})
		if ok {
			at = at.Add(time.Minute)
			s.Apply(rollout.StepSucceeded{Machine: m, Step: st, Attempt: 1, At: at})
		}
	}
	s.Apply(rollout.MachineBegun{Machine: uuid(1), At: at})
	for _, st := range rollout.Steps {
		step(uuid(1), st, true)
	}
	s.Apply(rollout.MachineDone{Machine: uuid(1), At: at})
	s.Apply(rollout.MachineBegun{Machine: uuid(2), At: at})
	step(uuid(2), rollout.StepCordon, true)
	step(uuid(2), rollout.StepDrain, false)
	s.Apply(rollout.DrainBlocked{Machine: uuid(2), Attempt: 1, Block: rollout.DrainBlock{Pod: "shop/web-1", Budget: "shop/web", At: at}})
	now := at.Add(30 * time.Second)
	conds, last, eta := operation.Explain(s, plan.Next(s, now).Waiting, now)
	var blocked *operation.Condition
	for i := range conds {
		if conds[i].Type == operation.ConditionDrainBlocked {
			blocked = &conds[i]
		}
	}
	if blocked == nil || !strings.Contains(blocked.Message, "shop/web-1") || !strings.Contains(blocked.Message, "PodDisruptionBudget shop/web") {
		t.Fatalf("the drain's block must name the pod and the budget: %+v", conds)
	}
	if !last.Equal(at) {
		t.Fatalf("last progress %s, want %s", last, at)
	}
	if eta.IsZero() || !eta.After(now) {
		t.Fatalf("an estimate is due once a machine is done: %s", eta)
	}
}
