package service_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
	"github.com/anvil-fleet/anvil/sim"
)

// The rollout scenarios share one stack (a control plane start costs tens
// of seconds); each has its own organization, pool and machines.
func TestRollouts(t *testing.T) {
	s := newStack(t)
	t.Run("ten machines two at a time", func(t *testing.T) { s.t = t; tenMachines(s) })
	t.Run("a PodDisruptionBudget holds the drain", func(t *testing.T) { s.t = t; pdbBlocks(s) })
	t.Run("an agent that never reports, then retry", func(t *testing.T) { s.t = t; neverReports(s) })
	t.Run("abort mid-way", func(t *testing.T) { s.t = t; abortMidway(s) })
	t.Run("remediation of a machine that never rejoins", func(t *testing.T) { s.t = t; remediation(s) })
	t.Run("a pool's rollout after another's", func(t *testing.T) { s.t = t; ordered(s) })
	t.Run("maintenance and graceful delete", func(t *testing.T) { s.t = t; maintenanceAndDelete(s) })
	t.Run("a machine provisions itself", func(t *testing.T) { s.t = t; selfProvisioning(s) })
	t.Run("the node follows the machine", func(t *testing.T) { s.t = t; nodeFollowsMachine(s) })
	t.Run("two replicas, one lease", func(t *testing.T) { s.t = t; twoReplicas(s) })
	t.Run("twenty crashes of the rollout service", func(t *testing.T) { s.t = t; crashes(s) })
}

// steady is the strategy of the scenarios: short timeouts so that a
// failure shows quickly.
func steady(maxUnavailable string) revapi.Rollout {
	return revapi.Rollout{MaxUnavailable: revapi.IntOrPercent(maxUnavailable), DrainTimeout: "2m", NodeReadyTimeout: "3m"}
}

// tenMachines: a 10-machine pool rolls out with maxUnavailable=2; the log
// shows every machine's steps in order, no more than 2 nodes are ever
// unschedulable, and every machine ends at the new revision, uncordoned.
// A rollback to revision 1 follows.
func tenMachines(s *stack) {
	org, pool := "ten", "ten"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, pool, fleet, 10)
	first := s.createPool(org, pool, "c1", poolSpec("1", steady("2")))
	if first.Progress.Done != 10 {
		s.t.Fatalf("provisioning rollout: %+v", first.Progress)
	}

	watch := s.watchNodes(pool + "-")
	callsBefore := commandCalls(s.t)
	rev := s.apply(org, pool, poolSpec("2", steady("2")))
	r := s.waitRollout(org, pool, uint64(rev), 5*time.Minute, api.StatusSucceeded)
	if r.Progress.Done != 10 || r.Progress.Total != 10 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	// The reboot steps read their instructions from the boot records they
	// watch: a step asks the boot service about its instruction at most
	// once, before the watch shows the record (none when the record was
	// watched already, as here after the provisioning rollout); they asked
	// at every wake-up before.
	const instructionGet = "cmd.boot.instruction.get"
	asked := commandCalls(s.t)[instructionGet].calls - callsBefore[instructionGet].calls
	if asked > 2*10 {
		s.t.Fatalf("the rollout asked %s %d times for 10 reboots; want at most twice each", instructionGet, asked)
	}
	s.t.Logf("%s asked %d times for 10 reboots", instructionGet, asked)
	if got := watch.maxCordoned(); got > 2 || got == 0 {
		s.t.Fatalf("at most %d nodes were unschedulable at once; want 1 or 2 (maxUnavailable 2)", got)
	}
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("nodes left cordoned: %v", c)
	}
	if bad := s.mislabelled(pool+"-", "anvil.dev/gen", "2"); len(bad) > 0 {
		s.t.Fatalf("nodes without revision 2's label: %v", bad)
	}
	lines := s.log(org, r.ID)
	wantSteps := []string{"begun", "cordon started", "cordon succeeded", "drain started", "drain succeeded",
		"reboot started", "reboot succeeded", "wait_boot started", "wait_boot succeeded",
		"wait_ready started", "wait_ready succeeded", "uncordon started", "uncordon succeeded", "done"}
	for _, m := range ms {
		var got []string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 2 && f[1] == m.Hostname() {
				w := strings.TrimSuffix(f[2], ":")
				if len(f) > 3 && !strings.HasSuffix(f[2], ":") {
					w += " " + strings.TrimSuffix(f[3], ":")
				}
				got = append(got, w)
			}
		}
		if !slices.Equal(got, wantSteps) {
			s.t.Fatalf("%s: steps\n%v\nwant\n%v\nlog:\n%s", m.Hostname(), got, wantSteps, strings.Join(lines, "\n"))
		}
		if n := len(m.Reboots()); n != 1 {
			s.t.Fatalf("%s rebooted %d times, want once", m.Hostname(), n)
		}
	}
	// Machines begin in order, two at a time: the third begins only after
	// one of the first two is done.
	order := beginOrder(lines)
	if !slices.IsSorted(order) || len(order) != 10 {
		s.t.Fatalf("begin order %v", order)
	}
	s.registryAll(org, pool, "ready", uint64(rev))
	s.t.Logf("rolled 10 machines in %s", r.FinishedAt.Sub(r.StartedAt))

	// Rollback to revision 1.
	s.applyRevision(org, pool, 1)
	rb := s.waitRollout(org, pool, 1, 5*time.Minute, api.StatusSucceeded)
	if !rb.Rollback || rb.Progress.Done != 10 {
		s.t.Fatalf("rollback %+v %+v", rb.Rollback, rb.Progress)
	}
	s.registryAll(org, pool, "ready", 1)
	if bad := s.mislabelled(pool+"-", "anvil.dev/gen", "1"); len(bad) > 0 {
		s.t.Fatalf("nodes without revision 1's label after the rollback: %v", bad)
	}
	for _, m := range ms {
		if m.BootedRevision() == "" || len(m.Reboots()) != 2 {
			s.t.Fatalf("%s: %d reboots after the rollback, want 2", m.Hostname(), len(m.Reboots()))
		}
	}
	if got := watch.maxCordoned(); got > 2 {
		s.t.Fatalf("%d nodes unschedulable at once during the rollback", got)
	}
}

func beginOrder(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "begun:" {
			out = append(out, f[1])
		}
	}
	return out
}

// pdbBlocks: a PodDisruptionBudget holds the drain; the log names the
// pod and the budget; relaxing the budget lets the rollout go on. The
// next rollout's drain is held until its timeout, fails with that reason,
// and the node stays cordoned until the abort releases it. A budget that
// allows no disruption at all fails the capacity check before anything
// is touched.
func pdbBlocks(s *stack) {
	org, pool := "pdb", "pdb"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	s.machines(org, pool, fleet, 2)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))
	ns := "pdb-shop"
	must(s.t, s.cp.CreateNamespace(s.ctx, ns))

	// Two pods on m01 under a budget that keeps one: the first eviction
	// goes through, the second is refused (bare pods are not replaced).
	cart := func(gen int) {
		_, err := s.cp.CreatePods(s.ctx, kubeharness.Pods{Namespace: ns, Name: fmt.Sprintf("cart%d", gen),
			Nodes: []string{pool + "-m01", pool + "-m01"}, Labels: map[string]string{"app": "cart"}})
		must(s.t, err)
	}
	cart(1)
	_, err := s.cp.CreatePDB(s.ctx, kubeharness.PDB{Namespace: ns, Name: "cart", Selector: map[string]string{"app": "cart"}, MinAvailable: ptr(intstr.FromInt32(1))})
	must(s.t, err)

	rev := s.apply(org, pool, poolSpec("2", steady("1")))
	var id string
	s.eventually("the drain of m01 is blocked and says by what", 2*time.Minute, func() (bool, string) {
		r, ok := s.findRollout(org, pool, uint64(rev))
		if !ok {
			return false, "no rollout"
		}
		id = r.ID
		for _, l := range s.log(org, r.ID) {
			if strings.Contains(l, pool+"-m01 drain blocked: pod pdb-shop/cart1-") && strings.Contains(l, "PodDisruptionBudget pdb-shop/cart refuses it; waited") {
				return true, ""
			}
		}
		return false, string(r.Status)
	})
	if r := s.get(org, id); r.Status != api.StatusRunning || r.Progress.Done != 0 {
		s.t.Fatalf("while blocked: %s %+v", r.Status, r.Progress)
	}
	// Relax the budget: the drain goes on and the rollout completes.
	must(s.t, s.setMinAvailable(ns, "cart", 0))
	r := s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusSucceeded)
	if r.Progress.Done != 2 {
		s.t.Fatalf("progress %+v", r.Progress)
	}

	// Again, with a drain timeout that comes first.
	cart(2)
	must(s.t, s.setMinAvailable(ns, "cart", 1))
	strat := steady("1")
	strat.DrainTimeout = "15s"
	rev = s.apply(org, pool, poolSpec("3", strat))
	r = s.waitRollout(org, pool, uint64(rev), 2*time.Minute, api.StatusFailed)
	if !strings.Contains(r.Reason, "drain timed out after 15s; pod pdb-shop/cart2-") || !strings.Contains(r.Reason, "was blocked by PodDisruptionBudget pdb-shop/cart") {
		s.t.Fatalf("reason %q", r.Reason)
	}
	if c := s.cordoned(pool + "-"); !slices.Equal(c, []string{pool + "-m01"}) {
		s.t.Fatalf("cordoned %v, want only m01 (failed at drain)", c)
	}
	if !slices.ContainsFunc(s.log(org, r.ID), func(l string) bool { return strings.Contains(l, "its node is LEFT CORDONED") }) {
		s.t.Fatalf("the log does not say that m01 stays cordoned:\n%s", strings.Join(s.log(org, r.ID), "\n"))
	}
	_, err = s.api.Abort(s.ctx, api.ControlRequest{Org: org, ID: r.ID, Reason: "give up"})
	must(s.t, err)
	r = s.waitRollout(org, pool, uint64(rev), time.Minute, api.StatusAborted)
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("the abort left %v cordoned", c)
	}
	if r.Progress.Released != 1 || r.Progress.NotStarted != 1 {
		s.t.Fatalf("abort progress %+v", r.Progress)
	}

	// A budget that allows nothing now fails the capacity check.
	must(s.t, s.setMinAvailable(ns, "cart", 2))
	rev = s.apply(org, pool, poolSpec("4", steady("1")))
	r = s.waitRollout(org, pool, uint64(rev), time.Minute, api.StatusFailed)
	if !strings.Contains(r.Reason, "PodDisruptionBudget pdb-shop/cart allows no disruption now") {
		s.t.Fatalf("reason %q", r.Reason)
	}
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("a failed check touched %v", c)
	}
}

// neverReports: a machine whose reboot never comes back fails wait_boot at
// the node-ready timeout; the rollout stops taking machines. Once the
// machine is back, Retry resumes at wait_boot and completes, and the
// machine was told to reboot only once.
func neverReports(s *stack) {
	org, pool := "hang", "hang"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, pool, fleet, 3)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))
	strat := steady("1")
	strat.NodeReadyTimeout = "1m"
	ms[0].Hang(true)
	rev := s.apply(org, pool, poolSpec("2", strat))
	r := s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusFailed)
	if !strings.Contains(r.Reason, "wait_boot timed out after 1m0s") || r.Progress.NotStarted != 2 {
		s.t.Fatalf("failed rollout: %q %+v", r.Reason, r.Progress)
	}
	if c := s.cordoned(pool + "-"); !slices.Equal(c, []string{pool + "-m01"}) {
		s.t.Fatalf("cordoned %v", c)
	}
	s.eventually("the registry says m01 failed, with the step", time.Minute, func() (bool, string) {
		m := s.registryMachines(org, pool)[pool+"-m01"]
		return m.Status == "failed" && m.Failure != nil && m.Failure.Step == "wait_boot", fmt.Sprintf("%s %+v", m.Status, m.Failure)
	})
	ms[0].Hang(false)
	_, err := s.api.Retry(s.ctx, api.ControlRequest{Org: org, ID: r.ID})
	must(s.t, err)
	r = s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusSucceeded)
	if r.Progress.Done != 3 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	for _, m := range ms {
		if n := len(m.Reboots()); n != 1 {
			s.t.Fatalf("%s rebooted %d times for this rollout, want 1", m.Hostname(), n)
		}
	}
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("left cordoned: %v", c)
	}
}

// abortMidway: abort while machines are at different steps; machines that
// rebooted finish, the others are released, untouched ones stay at their
// revision, and the report names every machine's final state.
func abortMidway(s *stack) {
	org, pool := "abort", "abort"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, func(c *sim.Config) { c.RebootTime = 2 * time.Second })
	s.machines(org, pool, fleet, 6)
	s.createPool(org, pool, "c1", poolSpec("1", steady("2")))
	rev := s.apply(org, pool, poolSpec("2", steady("2")))
	var id string
	s.eventually("two machines done", 3*time.Minute, func() (bool, string) {
		r, ok := s.findRollout(org, pool, uint64(rev))
		id = r.ID
		return ok && r.Progress.Done >= 2, fmt.Sprint(r.Progress)
	})
	_, err := s.api.Abort(s.ctx, api.ControlRequest{Org: org, ID: id, Reason: "change of plans"})
	must(s.t, err)
	r := s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusAborted)
	if r.Progress.Done < 2 || r.Progress.NotStarted == 0 || r.Progress.Done+r.Progress.Released+r.Progress.NotStarted+r.Progress.Failed != 6 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	lines := s.log(org, r.ID)
	finals := 0
	for _, l := range lines {
		if strings.Contains(l, "final_state") {
			finals++
		}
	}
	if finals != 6 {
		s.t.Fatalf("%d final_state lines, want one per machine:\n%s", finals, strings.Join(lines, "\n"))
	}
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("the abort left %v cordoned", c)
	}
	// The registry hears about it from the rollout's events, a moment later.
	s.eventually("the registry agrees with the report", time.Minute, func() (bool, string) {
		reg := s.registryMachines(org, pool)
		for _, m := range r.Machines {
			rm := reg[m.Hostname]
			want := uint64(1)
			switch rollout.Outcome(m.Outcome) {
			case rollout.OutcomeDone:
				want = uint64(rev)
			case rollout.OutcomeReleased, rollout.OutcomeNotStarted:
			default:
				return false, fmt.Sprintf("%s: outcome %s", m.Hostname, m.Outcome)
			}
			if rm.CurrentRevision != want || rm.Status != "ready" {
				return false, fmt.Sprintf("%s %s but registry %s at %d", m.Hostname, m.Outcome, rm.Status, rm.CurrentRevision)
			}
		}
		return true, ""
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// remediation: with --remediation-max-in-flight, a machine that booted
// but whose node never turned Ready gets one more reboot (a reapply), and
// the rollout goes on once it is back.
func remediation(s *stack) {
	org, pool := "heal", "heal"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, pool, fleet, 3)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))

	s.killRollout()
	s.rolloutCfg.RemediationMaxInFlight = 1
	s.startRollout()
	defer func() {
		s.killRollout()
		s.rolloutCfg.RemediationMaxInFlight = 0
		s.startRollout()
	}()

	strat := steady("1")
	strat.NodeReadyTimeout = "1m"
	// m01's node never turns Ready after its reboot (the switch takes
	// effect at once, so it is thrown as the reboot begins).
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) && len(ms[0].Reboots()) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		ms[0].NeverJoin(true)
	}()
	rev := s.apply(org, pool, poolSpec("2", strat))
	s.eventually("m01 is remediated", 3*time.Minute, func() (bool, string) {
		r, ok := s.findRollout(org, pool, uint64(rev))
		if !ok {
			return false, "no rollout"
		}
		for _, l := range s.log(org, r.ID) {
			if strings.Contains(l, pool+"-m01 reboot remediated: wait_ready timed out") {
				return true, ""
			}
		}
		return false, fmt.Sprint(r.Status, " ", r.Progress, " ", r.Reason, " strategy ", r.Strategy.RemediationMaxInFlight)
	})
	ms[0].NeverJoin(false) // whatever was wrong, the reboot fixed it
	r := s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusSucceeded)
	if r.Progress.Done != 3 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	for i, m := range ms {
		want := 1
		if i == 0 {
			want = 2
		}
		if n := len(m.Reboots()); n != want {
			s.t.Fatalf("%s rebooted %d times, want %d", m.Hostname(), n, want)
		}
	}
	if rb := ms[0].Reboots(); rb[1].Kind != "reapply" {
		s.t.Fatalf("the remediation's reboot was a %q", rb[1].Kind)
	}
	s.registryAll(org, pool, "ready", uint64(rev))
}

// ordered: a rollout of one pool waits for another pool's rollout (after),
// then runs; an unknown after is refused with the field named.
func ordered(s *stack) {
	org := "order"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, func(c *sim.Config) { c.RebootTime = 500 * time.Millisecond })
	s.machines(org, "first", fleet, 2)
	s.machines(org, "second", fleet, 2)
	s.createPool(org, "first", "c1", poolSpec("1", steady("1")))
	s.createPool(org, "second", "c1", poolSpec("1", steady("1")))
	// Save revision 2 of both without applying, then start them by hand.
	for _, p := range []string{"first", "second"} {
		if _, err := revapi.UpdatePool(s.ctx, s.nc, revapi.NewUpdatePoolRequest(org, p, poolSpec("2", steady("1")))); err != nil {
			s.t.Fatal(err)
		}
	}
	_, err := s.api.Start(s.ctx, api.StartRequest{Org: org, Pool: "second", After: "ro-nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "after") {
		s.t.Fatalf("an unknown after: %v", err)
	}
	a, err := s.api.Start(s.ctx, api.StartRequest{Org: org, Pool: "first", ID: "ro-first-2"})
	must(s.t, err)
	b, err := s.api.Start(s.ctx, api.StartRequest{Org: org, Pool: "second", After: a.ID, ID: "ro-second-2"})
	must(s.t, err)
	if b.After != a.ID || b.Revision != 2 {
		s.t.Fatalf("second rollout %+v", b.View)
	}
	s.eventually("both rollouts succeed", 3*time.Minute, func() (bool, string) {
		ra, rb := s.get(org, a.ID), s.get(org, b.ID)
		return ra.Status == api.StatusSucceeded && rb.Status == api.StatusSucceeded, fmt.Sprint(ra.Status, rb.Status)
	})
	ra, rb := s.get(org, a.ID), s.get(org, b.ID)
	// The second began its checks only after the first finished.
	var checksAt time.Time
	for _, l := range s.log(org, rb.ID) {
		if strings.Contains(l, "dependency: rollout "+a.ID+" succeeded") {
			checksAt, _ = time.Parse(time.RFC3339, strings.Fields(l)[0])
		}
	}
	if checksAt.IsZero() || checksAt.Before(ra.FinishedAt.Truncate(time.Second)) {
		s.t.Fatalf("the second rollout went on at %s, the first finished at %s", checksAt, ra.FinishedAt)
	}
}
