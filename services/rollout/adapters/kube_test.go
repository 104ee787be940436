package adapters

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

func TestDeleteNodeOfBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	cp := kubeharness.Start(t)
	ctx := t.Context()
	cl := NewCluster(ctx, "c1", cp.Client, slog.Default())
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
