package kubeharness_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/drain"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// The point of the harness: a drain that a PodDisruptionBudget forbids is
// refused by the API server, and goes through once the budget allows it.
func TestDrainIsHeldByPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	cp := kubeharness.Start(t)
	ctx := t.Context()

	// Both replicas land on worker-1, the only node so far.
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "worker-1"})))
	must(t, err1(cp.CreateDeployment(ctx, kubeharness.Deployment{Name: "web", Replicas: 2})))
	pdb, err := cp.CreatePDB(ctx, kubeharness.PDB{
		Name:         "web",
		Selector:     map[string]string{"app": "web"},
		MinAvailable: new(intstr.FromInt32(2)),
	})
	must(t, err)
	if pdb.Status.DisruptionsAllowed != 0 || pdb.Status.CurrentHealthy != 2 {
		t.Fatalf("pdb status = %+v, want 2 healthy and no disruption allowed", pdb.Status)
	}
	// Somewhere for the replacements to go.
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "worker-2"})))

	var out syncBuffer
	helper := &drain.Helper{
		Ctx:                  ctx,
		Client:               cp.Client,
		GracePeriodSeconds:   -1,
		IgnoreAllDaemonSets:  true,
		EvictErrorRetryDelay: 200 * time.Millisecond,
		Out:                  &out,
		ErrOut:               &out,
	}
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	must(t, err)
	must(t, drain.RunCordonOrUncordon(helper, node, true))
	node, err = cp.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	must(t, err)
	if !node.Spec.Unschedulable {
		t.Fatal("worker-1 is not cordoned")
	}

	// A direct eviction is refused with 429, the Eviction API's "not now".
	pods, err := cp.PodsOnNode(ctx, "worker-1", nil)
	must(t, err)
	if len(pods) != 2 {
		t.Fatalf("%d pods on worker-1, want 2", len(pods))
	}
	err = cp.Client.PolicyV1().Evictions(pods[0].Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: pods[0].Namespace},
	})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting %s: err = %v, want 429 TooManyRequests", pods[0].Name, err)
	}
	t.Logf("eviction refused as expected: %v", err)

	// The drain keeps retrying and gives up at its timeout.
	helper.Timeout = 3 * time.Second
	err = drain.RunNodeDrain(helper, "worker-1")
	if err == nil {
		t.Fatal("drain completed although the budget allows no disruption")
	}
	if !strings.Contains(err.Error(), "global timeout") {
		t.Fatalf("drain error = %v, want the global timeout", err)
	}
	if !strings.Contains(out.String(), "Cannot evict pod as it would violate the pod's disruption budget") {
		t.Errorf("drain output does not name the budget:\n%s", out.String())
	}
	pods, err = cp.PodsOnNode(ctx, "worker-1", nil)
	must(t, err)
	if len(pods) != 2 {
		t.Fatalf("%d pods left on worker-1 after the refused drain, want 2", len(pods))
	}

	// Relax the budget: one pod may go at a time. The drain evicts one,
	// waits for its replacement on worker-2 to be Ready, then the other.
	pdb.Spec.MinAvailable = new(intstr.FromInt32(1))
	_, err = cp.Client.PolicyV1().PodDisruptionBudgets("default").Update(ctx, pdb, metav1.UpdateOptions{})
	must(t, err)
	pdb, err = cp.WaitPDBComputed(ctx, "default", "web")
	must(t, err)
	if pdb.Status.DisruptionsAllowed != 1 {
		t.Fatalf("relaxed pdb allows %d disruptions, want 1", pdb.Status.DisruptionsAllowed)
	}
	helper.Timeout = 2 * time.Minute
	must(t, drain.RunNodeDrain(helper, "worker-1"))

	pods, err = cp.PodsOnNode(ctx, "worker-1", nil)
	must(t, err)
	if len(pods) != 0 {
		t.Fatalf("%d pods left on worker-1 after the drain", len(pods))
	}
	must(t, err1(cp.WaitDeploymentAvailable(ctx, "default", "web")))
	pods, err = cp.PodsOnNode(ctx, "worker-2", nil)
	must(t, err)
	if len(pods) != 2 {
		t.Fatalf("%d pods on worker-2 after the drain, want both replicas", len(pods))
	}
}

// The drain reports progress through the helper's callbacks from several
// goroutines; the buffer must not race.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// err1 drops a result so that must can check the error alone.
func err1[T any](_ T, err error) error { return err }
