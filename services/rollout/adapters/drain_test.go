package adapters

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/services/rollout/app"
)

func TestCutOffEvictions(t *testing.T) {
	now := time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	pod := func(ns, name, node string, created time.Duration, lbl map[string]string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Labels: lbl, CreationTimestamp: ago(created)},
			Spec:       corev1.PodSpec{NodeName: node},
		}
	}
	web := map[string]string{"app": "web"}
	budget := func(ns, name string, sel *metav1.LabelSelector, disrupted map[string]metav1.Time) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptedPods: disrupted},
		}
	}
	webSel := &metav1.LabelSelector{MatchLabels: web}
	deleting := pod("shop", "web-0", "n1", time.Hour, web)
	deleting.DeletionTimestamp = new(ago(time.Second))

	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		budgets []policyv1.PodDisruptionBudget
		want    []string // pod: budget
	}{{
		name:    "a pod of the node that its budget lists, recently: re-driven",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, web), pod("shop", "web-1", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(10 * time.Second)})},
		want:    []string{"shop/web-0: shop/web"},
	}, {
		name:    "an empty selector covers the namespace's pods (policy/v1)",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "all", &metav1.LabelSelector{}, map[string]metav1.Time{"web-0": ago(time.Second)})},
		want:    []string{"shop/web-0: shop/all"},
	}, {
		name:    "a pod of another node is not touched",
		pods:    []corev1.Pod{pod("shop", "web-0", "n2", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}, {
		name:    "a budget whose selector does not match the pod does not count",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, map[string]string{"app": "cart"})},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}, {
		name:    "a nil selector matches nothing",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", nil, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}, {
		name:    "a budget of another namespace listing the same name does not count",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("blog", "web", webSel, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}, {
		name:    "a pod the budget does not list is evicted as usual",
		pods:    []corev1.Pod{pod("shop", "web-1", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}, {
		name:    "an entry near its expiry is left to the disruption controller",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", time.Hour, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(redriveWindow)})},
	}, {
		name:    "a namesake created after the entry was not the evicted pod",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", 5*time.Second, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(10 * time.Second)})},
	}, {
		name:    "a pod created in the entry's second may be the evicted one",
		pods:    []corev1.Pod{pod("shop", "web-0", "n1", 10*time.Second, web)},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(10 * time.Second)})},
		want:    []string{"shop/web-0: shop/web"},
	}, {
		name:    "a pod being deleted is not re-driven again",
		pods:    []corev1.Pod{deleting},
		budgets: []policyv1.PodDisruptionBudget{budget("shop", "web", webSel, map[string]metav1.Time{"web-0": ago(time.Second)})},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range cutOffEvictions("n1", tc.pods, tc.budgets, now) {
				got = append(got, r.pod.Namespace+"/"+r.pod.Name+": "+r.budget)
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("re-driven %q, want %q", got, tc.want)
			}
		})
	}
}

// Issue 16: a rollout service killed during an eviction call leaves the pod
// in the budget's disruptedPods, not deleted, and the budget spent for two
// minutes. The drain that takes over finishes that eviction at once.
func TestDrainRedrivesCutOffEviction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cp := kubeharness.Start(t)
	ctx := t.Context()

	// Both replicas on worker-1; the budget allows one disruption.
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "worker-1"})))
	must(t, err1(cp.CreateDeployment(ctx, kubeharness.Deployment{Name: "web", Replicas: 2})))
	pdb, err := cp.CreatePDB(ctx, kubeharness.PDB{Name: "web", Selector: map[string]string{"app": "web"}, MinAvailable: new(intstr.FromInt32(1))})
	must(t, err)
	if pdb.Status.DisruptionsAllowed != 1 {
		t.Fatalf("budget allows %d disruptions, want 1", pdb.Status.DisruptionsAllowed)
	}
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "worker-2"}))) // for the replacements

	logs := &eventstest.SyncBuffer{}
	cl := NewCluster(ctx, "test", cp.Client, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	must(t, err1(cl.Cordon(ctx, "worker-1", "test")))
	pods, err := cp.PodsOnNode(ctx, "worker-1", nil)
	must(t, err)
	if len(pods) != 2 {
		t.Fatalf("%d pods on worker-1, want 2", len(pods))
	}
	cut, other := pods[0], pods[1]

	// The cut-off eviction: the API server recorded the pod in the
	// budget's status and spent its disruption, then its caller went away
	// before the deletion. The disruption controller keeps such an entry
	// for a pod that exists and is not being deleted, until it expires.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b, err := cp.Client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		b.Status.DisruptedPods = map[string]metav1.Time{cut.Name: metav1.Now()}
		b.Status.DisruptionsAllowed = 0
		_, err = cp.Client.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, b, metav1.UpdateOptions{})
		return err
	})
	must(t, err)
	pdb, err = cp.WaitPDBComputed(ctx, "default", "web")
	must(t, err)
	at, ok := pdb.Status.DisruptedPods[cut.Name]
	if !ok || pdb.Status.DisruptionsAllowed != 0 {
		t.Fatalf("budget status = %+v, want %s disrupted and no disruption allowed", pdb.Status, cut.Name)
	}
	// The budget is spent: every eviction is refused, that of the cut-off
	// pod too.
	for _, p := range []corev1.Pod{other, cut} {
		err = cp.Client.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: p.Name}})
		if !apierrors.IsTooManyRequests(err) {
			t.Fatalf("evicting %s while the budget is spent: err = %v, want 429", p.Name, err)
		}
	}

	// Without the re-drive the drain would be refused until the entry
	// expires (at + DeletionTimeout); it must be done before then.
	expires := at.Add(2 * time.Minute)
	dctx, cancel := context.WithDeadline(ctx, expires)
	defer cancel()
	blocks, lastBlock := 0, ""
	err = cl.Drain(dctx, "worker-1", app.DrainOptions{Blocked: func(pod, budget, msg string) { blocks, lastBlock = blocks+1, pod+" by "+budget+": "+msg }})
	if err != nil {
		t.Fatalf("drain: %v (the cut-off eviction's entry expires at %s; %d blocks, the last: %s)\nlogs:\n%s", err, expires, blocks, lastBlock, logs)
	}
	left, err := cp.PodsOnNode(ctx, "worker-1", nil)
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("%d pods left on worker-1 after the drain", len(left))
	}

	// The log names the pod and the budget, once.
	var redriven []map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		must(t, json.Unmarshal([]byte(line), &rec))
		if rec["msg"] == redriveMessage {
			redriven = append(redriven, rec)
		}
	}
	if len(redriven) != 1 || redriven[0]["pod"] != "default/"+cut.Name || redriven[0]["budget"] != "default/web" || redriven[0]["node"] != "worker-1" {
		t.Fatalf("re-drive log lines = %v, want one for default/%s by default/web\nlogs:\n%s", redriven, cut.Name, logs)
	}

	// Again: nothing to do, nothing re-driven.
	must(t, cl.Drain(ctx, "worker-1", app.DrainOptions{}))
	if n := strings.Count(logs.String(), redriveMessage); n != 1 {
		t.Errorf("%d re-drive log lines after a second drain, want 1", n)
	}
	must(t, err1(cp.WaitDeploymentAvailable(ctx, "default", "web")))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// err1 drops a result so that must can check the error alone.
func err1[T any](_ T, err error) error { return err }
