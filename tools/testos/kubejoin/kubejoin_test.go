// Package kubejoin boots the test OS's kubernetes variant in QEMU with a
// config shaped like anvil's rendered one and the join material of a real
// kubeadm-compatible control plane (libs/kubeharness WithKubeadm), and
// follows a real `kubeadm join` as far as it goes: join, the Node
// registered by the real kubelet with the pool's labels and taint, the
// Node Ready, a pod of the locally built sleeper image Running on it.
//
// It is a module of its own (GOWORK=off, not in go.work) because it needs
// libs/kubeharness, which the test OS's own module must not depend on:
//
//	cd tools/testos/kubejoin && GOWORK=off go test -count=1 -timeout 45m -v .
//
// Environment: as tools/testos/selftest (ANVIL_TESTOS_KUBERNETES_DIR,
// ANVIL_TESTOS_CONSOLE, ANVIL_TESTOS_MEMORY_MB), and libs/kubeharness's
// (ANVIL_SKIP_KUBE=1 skips).
package kubejoin

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/tools/testos/selftest/vmtest"
)

func TestKubeadmJoinFromTheTestOS(t *testing.T) {
	qemu := vmtest.FindQEMU(t)
	repo := vmtest.RepoRoot(t)
	imageDir := vmtest.BuildImage(t, repo, "kubernetes", "ANVIL_TESTOS_KUBERNETES_DIR")
	node := vmtest.LoadNodeArtifacts(t, imageDir)
	agentBin := vmtest.BuildAgent(t, repo)

	cp := kubeharness.Start(t, kubeharness.WithKubeadm(kubeharness.Kubeadm{
		KubeadmPath: filepath.Join(node.Dir, "kubeadm"),
	}))
	join := cp.Join
	if join == nil {
		t.Fatal("the control plane has no join material (kubeharness.WithKubeadm)")
	}
	t.Logf("control plane %s, advertised to the VM as %s (token id %s)", cp.RESTConfig().Host, join.APIServerEndpoint, join.TokenID)
	ctx := t.Context()

	uuid := vmtest.RandomUUID(t)
	credential := vmtest.RandomToken(t, 32)
	hostname := "kube-join-" + strings.ToLower(vmtest.RandomToken(t, 5))
	t.Logf("machine UUID %s, hostname %s (random)", uuid, hostname)
	agentSum := sha512.Sum512(agentBin)
	srv := &vmtest.BootServer{UUID: uuid, Credential: credential, Agent: agentBin, Files: map[string]string{
		"/assets/sysext/" + node.Sysext.Name: node.SysextPath(),
	}}
	// The config is set before the server starts serving (Start), so that
	// the handler goroutines see it.
	ts := httptest.NewUnstartedServer(srv)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	vmURL := "http://10.0.2.2:" + port
	labels := map[string]string{"anvil.dev/pool": "join-test", "anvil.dev/revision": "1"}
	taint := vmtest.Taint{Key: "anvil.dev/dedicated", Value: "join-test", Effect: "NoSchedule"}
	srv.Config = func(boot int) ([]byte, error) {
		return vmtest.KubernetesConfig{
			Hostname: hostname, Revision: fmt.Sprintf("mr-join-%d", boot), BootURL: vmURL, Credential: credential,
			AgentURL: vmURL + "/assets/anvil-agent", AgentHash: "sha512-" + hex.EncodeToString(agentSum[:]),
			SysextName: node.Sysext.Name, SysextURL: vmURL + "/assets/sysext/" + node.Sysext.Name,
			SysextHash: "sha512-" + node.Sysext.SHA512,
			Join:       vmtest.KubeJoin{APIServerEndpoint: join.APIServerEndpoint, Token: join.Token, CACertHash: join.CACertHash},
			Labels:     labels,
			Taints:     []vmtest.Taint{taint},
			Follow:     []string{"anvil-kubeadm-join.service", "kubelet.service", "containerd.service"},
		}.JSON()
	}
	ts.Start()
	t.Cleanup(ts.Close)

	memory := 2048
	if v := os.Getenv("ANVIL_TESTOS_MEMORY_MB"); v != "" {
		memory, _ = strconv.Atoi(v)
	}
	w, powerOn := vmtest.StartVM(t, vmtest.VMSpec{
		QEMU: qemu, ImageDir: imageDir, UUID: uuid, MemoryMB: memory, Server: srv,
		Append: "flatcar.first_boot=1 ignition.config.url=" + vmURL + "/ignition?uuid=" + uuid + "&token=" + vmtest.RandomToken(t, 24),
	})
	since := func() string { return fmt.Sprintf("%.1fs after power-on", time.Since(powerOn).Seconds()) }
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("console:\n%s", w.ConsoleText())
		}
	}()

	// 1. The boot finishes (multi-user.target waits for the join's oneshot),
	// and the join succeeded.
	w.Until("the boot to finish (the probe's report)", 20*time.Minute, func() bool {
		return len(vmtest.ProbeReports(w.ConsoleText())) > 0
	})
	r := vmtest.ProbeReports(w.ConsoleText())[0]
	t.Logf("boot finished %s; the probe's report:\n%s", since(), r)
	if got := r.Unit("anvil-kubeadm-join.service"); got["Result"] != "success" {
		t.Fatalf("kubeadm join failed: %v\n%s", got, r.Text("join-log"))
	}
	t.Logf("STEP 1 ok: kubeadm join succeeded (%s)", since())

	// 2. The kubelet registers the Node, named by the hostname, with the
	// pool's labels and taint and its own version.
	var n *corev1.Node
	w.Until("the Node "+hostname, 10*time.Minute, func() bool {
		var err error
		n, err = cp.Client.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
		return err == nil
	})
	t.Logf("STEP 2 ok: Node %s registered (%s): kubelet %s, container runtime %s, kernel %s, OS %s, addresses %v",
		hostname, since(), n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion,
		n.Status.NodeInfo.KernelVersion, n.Status.NodeInfo.OSImage, n.Status.Addresses)
	if n.Status.NodeInfo.KubeletVersion != node.KubernetesVersion {
		t.Errorf("the Node's kubelet is %s, want %s", n.Status.NodeInfo.KubeletVersion, node.KubernetesVersion)
	}
	for k, v := range labels {
		if n.Labels[k] != v {
			t.Errorf("the Node's label %s is %q, want %q (labels %v)", k, n.Labels[k], v, n.Labels)
		}
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
		return tt.Key == taint.Key && tt.Value == taint.Value && string(tt.Effect) == taint.Effect
	}) {
		t.Errorf("the Node lacks the taint %+v; it has %+v", taint, n.Spec.Taints)
	}

	// 3. The Node turns Ready by its own kubelet.
	w.Until("the Node to turn Ready", 10*time.Minute, func() bool {
		var err error
		n, err = cp.Client.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
		return err == nil && kubeharness.NodeIsReady(n)
	})
	t.Logf("STEP 3 ok: Node %s Ready (%s)", hostname, since())

	// 4. A pod of the locally built image runs there.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": hostname},
			Tolerations:  []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: corev1.TaintEffect(taint.Effect)}},
			Containers: []corev1.Container{{
				Name: "sleeper", Image: node.SleeperImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := cp.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the pod: %v", err)
	}
	var p *corev1.Pod
	w.Until("the sleeper pod Running and Ready on "+hostname, 10*time.Minute, func() bool {
		var err error
		p, err = cp.Client.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && kubeharness.PodIsReady(p)
	})
	t.Logf("STEP 4 ok: pod sleeper Running and Ready on %s with IP %s (%s)", p.Spec.NodeName, p.Status.PodIP, since())

	// When things happened, by the API server's clock (this host's), to the
	// second: the waits above poll one after another, the boot first.
	at := func(ts metav1.Time) string { return fmt.Sprintf("%.0fs", ts.Sub(powerOn).Seconds()) }
	n, _ = cp.Client.CoreV1().Nodes().Get(ctx, hostname, metav1.GetOptions{})
	ready := "?"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = at(c.LastTransitionTime)
		}
	}
	podReady := "?"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			podReady = at(c.LastTransitionTime)
		}
	}
	t.Logf("after power-on: Node registered %s, Node Ready %s, pod created %s, pod Ready %s; in the VM (systemd, since the kernel started): %s",
		at(n.CreationTimestamp), ready, at(p.CreationTimestamp), podReady, r.Text("analyze"))
	if p.Spec.NodeName != hostname {
		t.Errorf("the pod runs on %s, want %s", p.Spec.NodeName, hostname)
	}
	_, hbs, _, _, problems := srv.Snapshot()
	if len(hbs) == 0 {
		t.Error("the agent never heartbeated")
	}
	if len(problems) > 0 {
		t.Errorf("the boot server refused requests: %v", problems)
	}
}
