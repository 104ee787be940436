package adapters

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/services/rollout/app"
)

// TestClusterAgainstAPIServer checks the cluster's writes on a real API
// server (one control plane for all of them: it takes seconds to start).
func TestClusterAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cp := kubeharness.Start(t)
	ctx := t.Context()
	cl := NewCluster(ctx, "c1", cp.Client, slog.Default()).(*cluster)
	t.Run("DeleteNodeOfBoot", func(t *testing.T) { testDeleteNodeOfBoot(t, cp, cl) })
	t.Run("ServerVersion", func(t *testing.T) { testServerVersion(t, cp, cl) })
	t.Run("Uncordon", func(t *testing.T) { testUncordon(t, cp, cl) })
}

func testDeleteNodeOfBoot(t *testing.T, cp *kubeharness.ControlPlane, cl *cluster) {
	ctx := t.Context()
	register := func(name, bootID string) {
		t.Helper()
		// A kubelet gives its Node's status when it registers it.
		_, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: bootID}}}, metav1.CreateOptions{})
		must(t, err)
	}
	exists := func(name string) bool {
		t.Helper()
		_, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	register("old", "boot-1")
	if deleted, err := cl.DeleteNodeOfBoot(ctx, "old", "boot-1"); err != nil || !deleted || exists("old") {
		t.Fatalf("the Node of boot-1: deleted %v, err %v, still there %v", deleted, err, exists("old"))
	}
	// Registered again by the kubelet of the next boot: left alone.
	register("old", "boot-2")
	if deleted, err := cl.DeleteNodeOfBoot(ctx, "old", "boot-1"); err != nil || deleted || !exists("old") {
		t.Fatalf("the Node of boot-2 asked as boot-1's: deleted %v, err %v, still there %v", deleted, err, exists("old"))
	}
	if deleted, err := cl.DeleteNodeOfBoot(ctx, "missing", "boot-1"); err != nil || deleted {
		t.Fatalf("a missing Node: deleted %v, err %v", deleted, err)
	}
}

func testServerVersion(t *testing.T, cp *kubeharness.ControlPlane, cl *cluster) {
	ctx := t.Context()
	// The version the checks judge: major.minor.patch, read under the
	// caller's context.
	want, err := cp.Client.Discovery().ServerVersion()
	must(t, err)
	if v, err := cl.ServerVersion(ctx); err != nil || v == "" || !strings.HasPrefix(want.GitVersion, "v"+v) || strings.ContainsAny(v, "-+v") {
		t.Fatalf("ServerVersion: %q, %v (the server says %s)", v, err, want.GitVersion)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if v, err := cl.ServerVersion(ended); err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
		t.Fatalf("ServerVersion under an ended context: %q, %v", v, err)
	}
}

// testUncordon: one patch uncordons and gives the node its revision's
// labels and taints, leaving everyone else's; a taint list computed from a
// stale copy is refused, not written over a newer one.
func testUncordon(t *testing.T, cp *kubeharness.ControlPlane, cl *cluster) {
	ctx := t.Context()
	noSchedule := func(k, v string) corev1.Taint {
		return corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffectNoSchedule}
	}
	create := func(name string) {
		t.Helper()
		_, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "gen": "1", "old": "x", "theirs": "y"},
			Annotations: map[string]string{ManagedNodeConfigAnnotation: `{"labels":["gen","old"],"taints":["dedicated:NoSchedule"]}`}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{noSchedule("dedicated", "m"), noSchedule("their-taint", "")}}}, metav1.CreateOptions{})
		must(t, err)
		if _, err := cl.Cordon(ctx, name, "rollout/r1"); err != nil {
			t.Fatal(err)
		}
	}
	// The node as it is, without the taints the controller manager puts on
	// a node that reports no Ready condition (node.kubernetes.io/...).
	get := func(name string) *corev1.Node {
		t.Helper()
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return strings.HasPrefix(t.Key, "node.kubernetes.io/") })
		return n
	}
	want := &app.NodeConfig{Labels: map[string]string{"gen": "2", "new": "z"},
		Taints: []app.NodeTaint{{Key: "dedicated", Value: "metal", Effect: "NoSchedule"}, {Key: "gpu", Effect: "NoSchedule"}}}

	create("u1")
	must(t, cl.Uncordon(ctx, "u1", want))
	n := get("u1")
	if n.Spec.Unschedulable || n.Annotations[app.CordonedByAnnotation] != "" {
		t.Errorf("still cordoned: unschedulable %v, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
	wantLabels := map[string]string{"kubernetes.io/hostname": "u1", "gen": "2", "new": "z", "theirs": "y"}
	if !maps.Equal(n.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", n.Labels, wantLabels)
	}
	wantTaints := []corev1.Taint{noSchedule("dedicated", "metal"), noSchedule("their-taint", ""), noSchedule("gpu", "")}
	if !equality.Semantic.DeepEqual(n.Spec.Taints, wantTaints) {
		t.Errorf("taints %v, want %v", n.Spec.Taints, wantTaints)
	}
	if got := n.Annotations[ManagedNodeConfigAnnotation]; got != `{"labels":["gen","new"],"taints":["dedicated:NoSchedule","gpu:NoSchedule"]}` {
		t.Errorf("managed annotation %s", got)
	}

	// A release leaves the labels and taints as they are.
	create("u2")
	must(t, cl.Uncordon(ctx, "u2", nil))
	if n := get("u2"); n.Spec.Unschedulable || n.Labels["gen"] != "1" || n.Labels["old"] != "x" || len(n.Spec.Taints) != 2 {
		t.Errorf("released: unschedulable %v, labels %v, taints %v", n.Spec.Unschedulable, n.Labels, n.Spec.Taints)
	}

	// The taints of a copy someone wrote after: the precondition refuses
	// the patch.
	create("u3")
	stale, err := cp.Client.CoreV1().Nodes().Get(ctx, "u3", metav1.GetOptions{})
	must(t, err)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// The controller manager writes taints too: each try on a fresh read.
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "u3", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, noSchedule("added-meanwhile", ""))
		_, err = cp.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}))
	patch, err := uncordonPatch(stale, want)
	must(t, err)
	if _, err := cl.patchNode(ctx, "u3", string(patch)); !apierrors.IsConflict(err) {
		t.Fatalf("a taint list from a stale copy: %v, want a conflict", err)
	}
	must(t, cl.Uncordon(ctx, "u3", want))
	if n := get("u3"); !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "added-meanwhile" }) ||
		!slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "gpu" }) || n.Spec.Unschedulable {
		t.Errorf("after the conflict: taints %v, unschedulable %v", n.Spec.Taints, n.Spec.Unschedulable)
	}

	if err := cl.Uncordon(ctx, "missing", want); err != nil {
		t.Errorf("a missing node: %v", err)
	}
}
