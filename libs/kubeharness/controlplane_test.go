package kubeharness_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// Two control planes side by side must not share ports, files or state:
// each sees only the node it created, though both use the same name.
func TestParallelControlPlanesAreIsolated(t *testing.T) {
	t.Parallel()
	hosts := make(chan string, 2)
	t.Run("group", func(t *testing.T) {
		for i := range 2 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				cp := kubeharness.Start(t)
				ctx := t.Context()
				hosts <- cp.RESTConfig().Host

				must(t, err1(cp.CreateNode(ctx, kubeharness.Node{
					Name:   "worker",
					Labels: map[string]string{"harness": fmt.Sprint(i)},
				})))
				must(t, err1(cp.CreatePods(ctx, kubeharness.Pods{Name: "solo", Nodes: []string{"worker"}})))

				nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
				must(t, err)
				if len(nodes.Items) != 1 || nodes.Items[0].Labels["harness"] != fmt.Sprint(i) {
					t.Fatalf("harness %d sees nodes %v, want only its own", i, nodes.Items)
				}
			})
		}
	})
	close(hosts)
	var seen []string
	for h := range hosts {
		seen = append(seen, h)
	}
	if len(seen) == 2 && seen[0] == seen[1] {
		t.Fatalf("both control planes listen on %s", seen[0])
	}
}

// The kubeconfig, on disk and in memory, is enough for a client of its own,
// and the control plane node role is set as kubeadm would.
func TestKubeconfigAndControlPlaneNode(t *testing.T) {
	t.Parallel()
	cp := kubeharness.Start(t)
	ctx := t.Context()

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
	must(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	v, err := client.Discovery().ServerVersion()
	must(t, err)
	t.Logf("server version %s", v.GitVersion)

	node, err := cp.CreateNode(ctx, kubeharness.Node{
		Name:         "cp-1",
		ControlPlane: true,
		Labels:       map[string]string{"pool": "system"},
		Taints:       []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}},
	})
	must(t, err)
	if _, ok := node.Labels[kubeharness.ControlPlaneLabel]; !ok || node.Labels["pool"] != "system" {
		t.Errorf("labels = %v", node.Labels)
	}
	var keys []string
	for _, taint := range node.Spec.Taints {
		keys = append(keys, taint.Key)
	}
	if got := strings.Join(keys, ","); !strings.Contains(got, kubeharness.ControlPlaneLabel) || !strings.Contains(got, "dedicated") {
		t.Errorf("taints = %v", node.Spec.Taints)
	}
}

// A node taken away from kwok stays NotReady and behaves like a node with a
// dead kubelet: a pod deleted from it stays Terminating. Handed back to
// kwok, the node is Ready again and the pod goes. Then the node is deleted.
func TestNodeNotReadyAndBack(t *testing.T) {
	t.Parallel()
	cp := kubeharness.Start(t)
	ctx := t.Context()

	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "worker-1"})))
	must(t, cp.CreateNamespace(ctx, "apps"))
	must(t, err1(cp.CreatePods(ctx, kubeharness.Pods{Namespace: "apps", Name: "db", Nodes: []string{"worker-1", "worker-1"}})))

	must(t, cp.SetNodeNotReady(ctx, "worker-1"))
	must(t, cp.Client.CoreV1().Pods("apps").Delete(ctx, "db-0", metav1.DeleteOptions{}))
	// Neither the node nor the pod may move while kwok is not managing it.
	time.Sleep(2 * time.Second)
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	must(t, err)
	if kubeharness.NodeIsReady(node) {
		t.Fatal("worker-1 became Ready again while kwok was not managing it")
	}
	pod, err := cp.Client.CoreV1().Pods("apps").Get(ctx, "db-0", metav1.GetOptions{})
	must(t, err)
	if pod.DeletionTimestamp == nil {
		t.Fatal("db-0 has no deletion timestamp")
	}

	must(t, cp.SetNodeReady(ctx, "worker-1"))
	must(t, cp.WaitPodGone(ctx, "apps", "db-0"))
	must(t, err1(cp.WaitPodReady(ctx, "apps", "db-1", true)))

	// An unready pod counts against its budget, and kwok leaves it unready.
	must(t, err1(cp.CreatePDB(ctx, kubeharness.PDB{
		Namespace: "apps", Name: "db", Selector: map[string]string{"app": "db"},
		MinAvailable: new(intstr.FromInt32(1)),
	})))
	must(t, cp.SetPodReady(ctx, "apps", "db-1", false))
	pdb, err := cp.WaitPDBComputed(ctx, "apps", "db")
	must(t, err)
	if pdb.Status.CurrentHealthy != 0 || pdb.Status.DisruptionsAllowed != 0 {
		t.Fatalf("pdb status = %+v, want no healthy pod", pdb.Status)
	}
	must(t, cp.SetPodReady(ctx, "apps", "db-1", true))
	must(t, err1(cp.WaitPDBComputed(ctx, "apps", "db")))

	must(t, cp.DeleteNode(ctx, "worker-1"))
}

// A node reporting RebootingReason stays NotReady while kwok keeps it (its
// label stays); any other NotReady report kwok answers with Ready, as
// before. The node is Ready again once its reporter says so.
func TestRebootingNodeLeftNotReadyByKwok(t *testing.T) {
	t.Parallel()
	cp := kubeharness.Start(t)
	ctx := t.Context()
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "rebooting"})))
	must(t, err1(cp.CreateNode(ctx, kubeharness.Node{Name: "other"})))

	setReady := func(name string, status corev1.ConditionStatus, reason string) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"reason":%q,"lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
			status, reason, time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
		_, err := cp.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		must(t, err)
	}
	setReady("rebooting", corev1.ConditionFalse, kubeharness.RebootingReason)
	setReady("other", corev1.ConditionFalse, "KubeletNotReady")
	// The first was patched first: once kwok made the second Ready again,
	// it has had the first's update too.
	must(t, err1(cp.WaitNodeReady(ctx, "other", true)))
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, "rebooting", metav1.GetOptions{})
	must(t, err)
	if kubeharness.NodeIsReady(node) || node.Labels[kubeharness.KwokManagedLabel] != "true" {
		t.Fatalf("the rebooting node: Ready %t, kwok label %q; want NotReady and still kwok's", kubeharness.NodeIsReady(node), node.Labels[kubeharness.KwokManagedLabel])
	}
	setReady("rebooting", corev1.ConditionTrue, "KubeletReady")
	must(t, err1(cp.WaitNodeReady(ctx, "rebooting", true)))
}

// Without binaries the tests fail, and say how to build them.
func TestMissingBinariesFailWithBuildHint(t *testing.T) {
	if os.Getenv(kubeharness.EnvSkip) == "1" {
		t.Skip(kubeharness.EnvSkip + "=1")
	}
	t.Setenv(kubeharness.EnvBinDir, t.TempDir())

	_, err := kubeharness.BinDir()
	if !errors.Is(err, kubeharness.ErrBinariesMissing) || !strings.Contains(err.Error(), kubeharness.BuildCommand) {
		t.Fatalf("BinDir() error = %v, want one naming %q", err, kubeharness.BuildCommand)
	}

	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kubeharness.Start(rec)
	}()
	<-done
	if rec.skipped || !rec.failed || !strings.Contains(rec.msg, kubeharness.BuildCommand) {
		t.Fatalf("Start: failed=%t skipped=%t message=%q, want a failure naming %q",
			rec.failed, rec.skipped, rec.msg, kubeharness.BuildCommand)
	}

	t.Setenv(kubeharness.EnvSkip, "1")
	rec = &recordingTB{TB: t}
	done = make(chan struct{})
	go func() {
		defer close(done)
		kubeharness.Start(rec)
	}()
	<-done
	if !rec.skipped || rec.failed {
		t.Fatalf("Start with %s=1: failed=%t skipped=%t, want a skip", kubeharness.EnvSkip, rec.failed, rec.skipped)
	}
}

// recordingTB notes how Start ends a test instead of ending this one.
type recordingTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

// Stop leaves no process behind, even when called twice.
func TestStopLeavesNoProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(kubeharness.EnvSkip) == "1" {
		t.Skip(kubeharness.EnvSkip + "=1")
	}
	cp, err := kubeharness.StartProcess(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pids := cp.PIDs()
	if len(pids) != 5 {
		t.Fatalf("pids = %v, want 5 components", pids)
	}
	must(t, cp.Stop())
	must(t, cp.Stop())
	for name, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (process group %d) still exists: %v", name, pid, err)
		}
	}
}

// BenchmarkStart measures a warm start: binaries cached, fresh directory,
// until the API server is ready and the default service account exists.
// Its size is the number of starts, -benchtime (one start takes seconds,
// so ANVIL_BENCH_SCALE has nothing to shrink).
func BenchmarkStart(b *testing.B) {
	if os.Getenv(kubeharness.EnvSkip) == "1" {
		b.Skip(kubeharness.EnvSkip + "=1")
	}
	var started time.Duration
	for range b.N {
		t0 := time.Now()
		cp, err := kubeharness.StartProcess(context.Background(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		started += time.Since(t0)
		b.StopTimer()
		if err := cp.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(started.Seconds()/float64(b.N), "start_s")
	b.Logf("started and stopped a control plane (etcd, kube-apiserver, controller manager, scheduler, kwok) %d time(s): %s per start",
		b.N, (started / time.Duration(b.N)).Round(time.Millisecond))
}

// A node lease kwok cannot honour is refused before anything starts, and
// the error names the option.
func TestNodeLeaseDurationRefused(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 1500 * time.Millisecond, 4*time.Second + time.Millisecond} {
		_, err := kubeharness.StartProcess(context.Background(), t.TempDir(), kubeharness.WithNodeLeaseDuration(d))
		if err == nil || !strings.Contains(err.Error(), "WithNodeLeaseDuration") {
			t.Errorf("WithNodeLeaseDuration(%s): err = %v, want a refusal naming the option", d, err)
		}
	}
}
