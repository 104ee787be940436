package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/demo/story"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/sim"
)

func oneMinute(o *story.Options) { o.MaxUnavailable, o.NodeReadyTimeout = "1", "1m" }

// cordonedNodes lists the story's nodes that are unschedulable.
func cordonedNodes(t *testing.T, s *story.Story) []string {
	l, err := s.Env.Kube.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	must(t, err)
	var out []string
	for _, n := range l.Items {
		if strings.HasPrefix(n.Name, s.Opts.Pool+"-") && n.Spec.Unschedulable {
			out = append(out, n.Name)
		}
	}
	return out
}

func machineStatus(s *story.Story, uuid string) string {
	m, err := s.API.GetMachine(context.Background(), uuid)
	if err != nil {
		return err.Error()
	}
	return string(m.Status)
}

// hangThenRetry: the first machine's reboot never comes back; wait_boot
// fails at the 1m node-ready timeout and the rollout fails with that
// reason, touching no other machine. Once the machine is back, Retry
// completes the rollout, and no machine rebooted twice.
func hangThenRetry(t *testing.T, env *story.Env) {
	s := newStory(t, env, "hang", 3, oneMinute)
	ctx := ctxT(t, 4*time.Minute)
	s.Pre[0].Hang(true)
	before := reboots(s.Pre)
	_, ro, err := s.ChangeVersion(ctx, "1.37")
	must(t, err)
	r, err := s.WaitRolloutStatus(ctx, ro.ID, "failed", "succeeded", "aborted")
	must(t, err)
	if r.Status != "failed" || !strings.Contains(r.Reason, "wait_boot timed out after 1m0s") || r.Progress.NotStarted != 2 {
		t.Fatalf("want failed at wait_boot: %s %q %+v", r.Status, r.Reason, r.Progress)
	}
	if c := cordonedNodes(t, s); !slices.Equal(c, []string{"hang-01"}) {
		t.Fatalf("cordoned %v, want hang-01", c)
	}
	eventually(t, "the registry says hang-01 failed", time.Minute, func() (bool, string) {
		st := machineStatus(s, s.Pre[0].UUID())
		return st == "failed", st
	})
	s.Pre[0].Hang(false)
	_, err = s.API.RetryRollout(ctx, ro.ID, "it is back")
	must(t, err)
	r, err = s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if r.Status != "succeeded" || r.Progress.Done != 3 {
		t.Fatalf("after retry: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	for u, n := range reboots(s.Pre) {
		if n-before[u] != 1 {
			t.Fatalf("%s rebooted %d times, want once", u, n-before[u])
		}
	}
	if c := cordonedNodes(t, s); len(c) > 0 {
		t.Fatalf("left cordoned: %v", c)
	}
}

// neverJoins: the first machine reboots and reports its revision, but its
// node never becomes Ready: wait_ready fails at the node-ready timeout
// (1m, the minimum). When it joins, Retry completes the rollout.
func neverJoins(t *testing.T, env *story.Env) {
	s := newStory(t, env, "join", 2, func(o *story.Options) {
		oneMinute(o)
		o.Sim = func(c *sim.Config) { c.RebootTime, c.RebootJitter = 2*time.Second, 0 }
	})
	ctx := ctxT(t, 4*time.Minute)
	_, ro, err := s.ChangeVersion(ctx, "1.37")
	must(t, err)
	// once its reboot has begun, its node will not come back Ready (set
	// earlier, the sanity checks would refuse to start with it NotReady)
	eventually(t, "join-01 reboots", 2*time.Minute, func() (bool, string) {
		p := s.Pre[0].Phase()
		return p == sim.PhaseRebooting, string(p)
	})
	s.Pre[0].NeverJoin(true)
	r, err := s.WaitRolloutStatus(ctx, ro.ID, "failed", "succeeded", "aborted")
	must(t, err)
	if r.Status != "failed" || !strings.Contains(r.Reason, "wait_ready timed out") || r.Progress.NotStarted != 1 {
		t.Fatalf("want failed at wait_ready: %s %q %+v", r.Status, r.Reason, r.Progress)
	}
	entries, err := s.Log(ctx, ro.ID)
	must(t, err)
	if !slices.ContainsFunc(entries, func(e client.LogEntry) bool {
		return e.Node == "join-01" && e.Step == "wait_boot" && e.Outcome == "succeeded"
	}) {
		t.Fatalf("join-01 should have booted its revision before failing to join")
	}
	s.Pre[0].NeverJoin(false)
	_, err = s.API.RetryRollout(ctx, ro.ID, "")
	must(t, err)
	r, err = s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if r.Status != "succeeded" || r.Progress.Done != 2 {
		t.Fatalf("after retry: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
}

// maintenanceAndDelete: maintenance on and off, and a graceful delete,
// each an Operation with its log, through the HTTP API.
func maintenanceAndDelete(t *testing.T, env *story.Env) {
	s := newStory(t, env, "ops", 2, oneMinute)
	ctx := ctxT(t, 3*time.Minute)
	must(t, env.Kube.CreateNamespace(ctx, "ops-shop"))
	_, err := env.Kube.CreatePods(ctx, kubeharness.Pods{Namespace: "ops-shop", Name: "web", Nodes: []string{"ops-01", "ops-02"}})
	must(t, err)
	m1, m2 := s.Pre[0].UUID(), s.Pre[1].UUID()

	_, err = s.API.EnterMaintenance(ctx, m1)
	must(t, err)
	eventually(t, "ops-01 in maintenance", time.Minute, func() (bool, string) { st := machineStatus(s, m1); return st == "maintenance", st })
	if c := cordonedNodes(t, s); !slices.Equal(c, []string{"ops-01"}) {
		t.Fatalf("cordoned %v", c)
	}
	pods, err := env.Kube.PodsOnNode(ctx, "ops-01", nil)
	must(t, err)
	if len(pods) != 0 {
		t.Fatalf("%d pods left on ops-01 in maintenance", len(pods))
	}
	ops, err := s.API.ListOperations(ctx, client.OperationFilter{Kind: rolloutapi.KindMaintenanceEnter})
	must(t, err)
	if len(ops.Items) != 1 || ops.Items[0].Kind != rolloutapi.KindMaintenanceEnter || ops.Items[0].Status != "succeeded" {
		t.Fatalf("operations %+v", ops.Items)
	}
	log, err := s.Log(ctx, ops.Items[0].ID)
	must(t, err)
	var steps []string
	for _, e := range log {
		steps = append(steps, e.Step+" "+e.Outcome)
	}
	if got := strings.Join(steps, ", "); got != " started, cordon started, cordon succeeded, drain started, drain succeeded, complete started, complete succeeded,  succeeded" {
		t.Fatalf("maintenance log: %s", got)
	}

	_, err = s.API.ExitMaintenance(ctx, m1)
	must(t, err)
	eventually(t, "ops-01 ready and uncordoned", time.Minute, func() (bool, string) {
		c := cordonedNodes(t, s)
		st := machineStatus(s, m1)
		return len(c) == 0 && st == "ready", fmt.Sprint(c, st)
	})

	s.Fleet.Machine(m2).NeverJoin(true) // powered off for good: its node must not come back
	_, err = s.API.DeleteMachine(ctx, m2, client.DeleteGraceful)
	must(t, err)
	eventually(t, "ops-02 deleted", time.Minute, func() (bool, string) {
		_, err := s.API.GetMachine(ctx, m2)
		return client.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := env.Kube.Client.CoreV1().Nodes().Get(ctx, "ops-02", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node ops-02 after the delete: %v", err)
	}
	// the registry removes the machine in the operation's last step, which
	// succeeds a moment later
	eventually(t, "the deletion operation succeeded", time.Minute, func() (bool, string) {
		ops, err := s.API.ListOperations(ctx, client.OperationFilter{Kind: rolloutapi.KindDeletion})
		if err != nil {
			return false, err.Error()
		}
		return len(ops.Items) == 1 && ops.Items[0].Status == "succeeded" && ops.Items[0].Machine == m2, fmt.Sprintf("deletion operations %+v", ops.Items)
	})
}

// stackRestart: every service and the embedded server stop while a
// rollout runs, and start again on the same data directory; the rollout
// finishes, every machine rebooted exactly once, with one instruction.
func stackRestart(t *testing.T, env *story.Env) {
	s := newStory(t, env, "restart", 6, func(o *story.Options) { o.MaxUnavailable = "2" })
	ctx := ctxT(t, 4*time.Minute)
	before := reboots(s.Pre)
	_, ro, err := s.ChangeVersion(ctx, "1.37")
	must(t, err)
	eventually(t, "two machines done", 2*time.Minute, func() (bool, string) {
		r, err := s.Rollout(ctx, ro.ID)
		return err == nil && r.Progress.Done >= 2, fmt.Sprint(r.Progress, err)
	})
	r, err := s.Rollout(ctx, ro.ID)
	must(t, err)
	if r.Status != "running" {
		t.Fatalf("the rollout is %s before the restart; the test wants it running", r.Status)
	}
	t.Logf("restarting the whole stack with the rollout at %+v", r.Progress)
	must(t, env.RestartStack(ctx))
	r, err = s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if r.Status != "succeeded" || r.Progress.Done != 6 {
		t.Fatalf("after the restart: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	for u, n := range reboots(s.Pre) {
		if n-before[u] != 1 {
			t.Fatalf("%s rebooted %d times, want once", u, n-before[u])
		}
	}
	log, err := s.Log(ctx, ro.ID)
	must(t, err)
	rebootSteps := map[string]int{}
	for _, e := range log {
		if e.Step == "reboot" && e.Outcome == "started" {
			rebootSteps[e.Node]++
		}
	}
	for node, n := range rebootSteps {
		if n != 1 {
			t.Fatalf("%s: %d reboot steps in the log", node, n)
		}
	}
	if len(rebootSteps) != 6 {
		t.Fatalf("reboot steps for %d machines", len(rebootSteps))
	}
}
