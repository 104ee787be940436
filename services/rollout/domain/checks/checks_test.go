package checks

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

func uuidOf(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func fixture(t *testing.T) *rollout.State {
	var s rollout.State
	evs, err := rollout.Decide(s, rollout.Start{ID: "r1", Pool: "workers", Cluster: "prod", Revision: 3,
		Machines: []rollout.Machine{
			{UUID: uuidOf(1), Hostname: "m01"}, {UUID: uuidOf(2), Hostname: "m02"}, {UUID: uuidOf(3), Hostname: "m03", NoNode: true},
		},
		Strategy: rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "2"}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		s.Apply(e)
	}
	return &s
}

func healthy() Facts {
	return Facts{
		ControlPlaneVersion: "1.33.5", KubeletVersion: "1.33.5",
		Machines: []Machine{
			{UUID: uuidOf(1), Status: "ready", Online: true, NodeFound: true, NodeReady: true},
			{UUID: uuidOf(2), Status: "ready", Online: true, NodeFound: true, NodeReady: true, Unschedulable: true, CordonedByAnvil: true},
			{UUID: uuidOf(3), Status: "pending", Online: true},
		},
		Budgets: []Budget{{Name: "shop/cart", DisruptionsAllowed: 1, PodsPerNode: map[string]int{"m01": 1, "m02": 1, "m09": 3}}},
		Holders: []Holder{{Rollout: "r1", Machines: []string{uuidOf(1)}}, {Rollout: "other-pool", Machines: []string{uuidOf(7)}}},
	}
}

func TestEvaluateHealthy(t *testing.T) {
	rs := Evaluate(fixture(t), healthy())
	if len(rs) != len(rollout.RequiredChecks) {
		t.Fatalf("%+v", rs)
	}
	for i, r := range rs {
		if !r.Passed || r.Name != rollout.RequiredChecks[i] {
			t.Errorf("%+v", r)
		}
	}
	if want := "PodDisruptionBudget shop/cart allows 1 disruptions and 2 machines out may hold 2 of its pods: drains may wait for it"; rs[4].Reason != want {
		t.Errorf("capacity note %q", rs[4].Reason)
	}
	// The results are accepted by the aggregate.
	evs, err := rollout.Decide(*fixture(t), rollout.RecordChecks{Results: rs}, time.Now())
	if err != nil || len(evs) != 1 {
		t.Fatalf("%v %v", evs, err)
	}
}

func TestEvaluateFailures(t *testing.T) {
	f := healthy()
	f.ClusterError = "dial tcp 10.0.0.1:6443: connect: connection refused"
	f.KubeletVersion = "1.34.1"
	f.Holders = append(f.Holders, Holder{Rollout: "r0", Machines: []string{uuidOf(2), uuidOf(1)}})
	f.Machines[0].NodeReady = false
	f.Machines[1].CordonedByAnvil = false
	f.Machines[2].Status, f.Machines[2].Online = "maintenance", false
	f.Budgets = append(f.Budgets, Budget{Name: "db/pg", DisruptionsAllowed: 0, PodsPerNode: map[string]int{"m02": 1, "m01": 1}})
	var got []string
	for _, r := range Evaluate(fixture(t), f) {
		if r.Passed {
			t.Errorf("passed: %+v", r)
			continue
		}
		got = append(got, r.Name+": "+r.Reason)
	}
	want := []string{
		"cluster_reachable: the API of cluster prod did not answer: dial tcp 10.0.0.1:6443: connect: connection refused",
		"version_skew: kubelet 1.34.1 would be newer than the control plane 1.33.5; upgrade the control plane first",
		"exclusive: rollout r0 is still active on m01, m02; let it finish, retry it to success or abort it",
		"machines_healthy: node m01 is not Ready",
		"machines_healthy: node m02 was cordoned by someone else; anvil would not uncordon it, so uncordon it or leave the machine out",
		"machines_healthy: m03 is maintenance",
		"capacity: PodDisruptionBudget db/pg allows no disruption now; draining m01, m02 would block",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	f = healthy()
	f.Machines = f.Machines[:1]
	f.Machines[0].Online = false
	f.ControlPlaneVersion = ""
	rs := Evaluate(fixture(t), f)
	var reasons []string
	for _, r := range rs {
		if !r.Passed {
			reasons = append(reasons, r.Reason)
		}
	}
	if want := "the control plane's version is not known (\"\")|m01 is offline (no agent heartbeat)|m02: nothing is known about it|m03: nothing is known about it"; strings.Join(reasons, "|") != want {
		t.Errorf("%q", strings.Join(reasons, "|"))
	}
}
