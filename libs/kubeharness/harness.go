package kubeharness

import (
	"errors"
	"os"
	"testing"
	"time"
)

// Start starts a control plane for the test and stops it when the test
// ends. It fails the test when the binaries are missing, naming the command
// that builds them; with ANVIL_SKIP_KUBE=1 it skips instead.
//
// On failure, the tail of every component's log goes to t.Log.
func Start(t testing.TB, opts ...Option) *ControlPlane {
	t.Helper()
	if os.Getenv(EnvSkip) == "1" {
		t.Skip("kubeharness: " + EnvSkip + "=1, skipping a test that needs a Kubernetes control plane")
	}
	// TempDir registers its removal now; cleanups run last-in-first-out, so
	// the processes below are stopped before their directory goes.
	dir := t.TempDir()
	cp, err := StartProcess(t.Context(), dir, opts...)
	if err != nil {
		if errors.Is(err, ErrBinariesMissing) {
			t.Fatalf("kubeharness: %v\nSet %s=1 to skip tests that need Kubernetes.", err, EnvSkip)
		}
		t.Fatalf("kubeharness: starting the control plane: %v", err)
	}
	t.Logf("kubeharness: control plane ready in %s (API server %s, logs in %s/logs)",
		cp.StartupDuration.Round(time.Millisecond), cp.restConfig.Host, dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("kubeharness: the test failed; component logs follow\n" + cp.LogTails(40))
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("kubeharness: stopping the control plane: %v", err)
		}
	})
	return cp
}
