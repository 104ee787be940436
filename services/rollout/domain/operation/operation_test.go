package operation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

var t0 = time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC)

func uuidOf(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func TestViewFromEvents(t *testing.T) {
	strategy := rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "50%"}}.WithDefaults()
	evs := []any{
		rollout.Started{ID: "r1", Pool: "workers", Revision: 4, Rollback: true, PoolSize: 4, Strategy: strategy, RequestedBy: "token:t1 (ops)", At: t0,
			Machines: []rollout.Machine{{UUID: uuidOf(1), Hostname: "m01"}, {UUID: uuidOf(2), Hostname: "m02"}},
			Excluded: []rollout.Exclusion{{UUID: uuidOf(3), Hostname: "m03", Reason: "in maintenance"}}},
		rollout.ChecksRecorded{At: t0, Results: []rollout.CheckResult{{Name: rollout.CheckClusterReachable, Passed: true}, {Name: rollout.CheckCapacity, Passed: true, Reason: "every budget allows 1"}}},
		rollout.MachineBegun{Machine: uuidOf(1), At: t0},
		rollout.StepStarted{Machine: uuidOf(1), Step: rollout.StepCordon, Attempt: 1, Deadline: t0.Add(5 * time.Minute), At: t0},
		rollout.StepSucceeded{Machine: uuidOf(1), Step: rollout.StepCordon, Attempt: 1, Message: "cordoned", At: t0},
		rollout.StepStarted{Machine: uuidOf(1), Step: rollout.StepDrain, Attempt: 1, Deadline: t0.Add(15 * time.Minute), At: t0},
		rollout.DrainBlocked{Machine: uuidOf(1), Attempt: 1, Block: rollout.DrainBlock{Pod: "shop/cart-0", Budget: "shop/cart", WaitedFor: values.Duration(3 * time.Minute), At: t0.Add(3 * time.Minute)}},
		rollout.StepFailed{Machine: uuidOf(1), Step: rollout.StepDrain, Attempt: 1, TimedOut: true, Reason: "drain timed out after 15m0s", At: t0.Add(15 * time.Minute)},
	}
	v := Project(evs)
	if v.Status != rollout.StatusRunning || v.Progress != (Progress{Total: 2, Failed: 1, NotStarted: 1}) || v.Progress.String() != "0 of 2" {
		t.Fatalf("%s %+v", v.Status, v.Progress)
	}
	var got []string
	for _, e := range v.Log {
		got = append(got, e.String())
	}
	want := []string{
		"2025-06-02T09:00:00Z started: rollback of pool workers to revision 4: 2 machines, maxUnavailable 50% (2 at a time); requested by token:t1 (ops)",
		"2025-06-02T09:00:00Z m03 excluded: left out and not touched: in maintenance",
		"2025-06-02T09:00:00Z check_passed: cluster_reachable",
		"2025-06-02T09:00:00Z check_passed: capacity; every budget allows 1",
		"2025-06-02T09:00:00Z m01 begun: out of service from now on (1 of at most 2 out)",
		"2025-06-02T09:00:00Z m01 cordon started: attempt 1, deadline 2025-06-02T09:05:00Z",
		"2025-06-02T09:00:00Z m01 cordon succeeded: cordoned",
		"2025-06-02T09:00:00Z m01 drain started: attempt 1, deadline 2025-06-02T09:15:00Z",
		"2025-06-02T09:03:00Z m01 drain blocked: pod shop/cart-0 cannot be evicted: PodDisruptionBudget shop/cart refuses it; waited 3m0s so far",
		"2025-06-02T09:15:00Z m01 drain timed_out: drain timed out after 15m0s; the node stays cordoned",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The rollout finishes failed: every machine's state is logged.
	v.Apply(&rollout.Failed{Reason: "machine m01 failed at drain", At: t0.Add(15 * time.Minute), Machines: v.state.Report()})
	tail := v.Log[len(v.Log)-3:]
	if tail[0].Outcome != LogFailed || tail[1].Outcome != LogFinalState || !strings.Contains(tail[1].Message, "its node is LEFT CORDONED") ||
		tail[2].Message != "not started; untouched" {
		t.Errorf("%v", tail)
	}
	if v.Status != rollout.StatusFailed || v.Machines[0].Node != rollout.NodeCordoned || v.FinishedAt.IsZero() {
		t.Errorf("%+v", v)
	}
	// Events before Started and unknown events are ignored.
	var empty View
	empty.Apply(rollout.MachineBegun{Machine: uuidOf(1)})
	empty.Apply(nil)
	if len(empty.Log) != 0 || empty.ID != "" {
		t.Errorf("%+v", empty)
	}
}

// A final report split over MachinesReported events and the final event
// logs every machine's final state, as one event's did.
func TestViewLogsASplitFinalReport(t *testing.T) {
	strategy := rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "50%"}}.WithDefaults()
	v := Project([]any{rollout.Started{ID: "r1", Pool: "workers", Revision: 2, PoolSize: 2, Strategy: strategy, At: t0,
		Machines: []rollout.Machine{{UUID: uuidOf(1), Hostname: "m01"}, {UUID: uuidOf(2), Hostname: "m02"}}}})
	report := v.state.Report()
	v.Apply(rollout.MachinesReported{Machines: report[:1], At: t0})
	v.Apply(rollout.Aborted{Machines: report[1:], At: t0})
	var finals []string
	for _, e := range v.Log {
		if e.Outcome == LogFinalState {
			finals = append(finals, e.Node+": "+e.Message)
		}
	}
	if want := []string{"m01: not started; untouched", "m02: not started; untouched"}; strings.Join(finals, "\n") != strings.Join(want, "\n") {
		t.Errorf("final states logged:\n%s\nwant\n%s", strings.Join(finals, "\n"), strings.Join(want, "\n"))
	}
	if v.Status != rollout.StatusAborted {
		t.Errorf("status %s; want aborted", v.Status)
	}
}
