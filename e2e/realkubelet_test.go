package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// TestRealKubelet is the whole story on a real node: a QEMU machine with
// real iPXE boots the test OS's kubernetes variant (Ignition in the
// initramfs, then systemd running exactly the units the rendered config
// enables), the real `kubeadm join` joins the harness's kubeadm-compatible
// control plane with the cluster's bootstrap token and CA pin, and the real
// kubelet registers the Node with the pool's labels and taint. A Deployment
// with a PodDisruptionBudget runs on it (containerd, a locally built
// image). Then Save & Apply of a new node label: the rollout cordons the
// real node, drains it through the Eviction API (the pods move to kwok
// nodes, the budget holding), the agent reboots the VM into revision 2,
// kubeadm joins again, the kubelet re-registers, the Node turns Ready and
// the rollout uncordons it with revision 2's labels.
func TestRealKubelet(t *testing.T) {
	rm := newRealMachine(t, "kubernetes", kubeharness.WithKubeadm(kubeharness.Kubeadm{}))
	ctx := rm.ctx
	kube := rm.kube
	join := kube.Join
	if join == nil {
		t.Fatal("the control plane has no join material (kubeharness.WithKubeadm)")
	}
	t.Logf("control plane advertised to the VM at %s (bootstrap token %s.…)", join.APIServerURL, join.TokenID)
	rm.setUp(client.ClusterCreate{
		Name: "metal", APIEndpoint: join.APIServerURL, KubernetesVersion: rmKubernetes,
		Kubeconfig: string(kube.Kubeconfig), BootstrapToken: join.Token, CACertHash: join.CACertHash,
	})
	taint := client.Taint{Key: "anvil.dev/dedicated", Value: "metal", Effect: "NoSchedule"}
	rm.createPool("1", []client.Taint{taint})

	const uuid = "4c4c4544-0035-4b10-8056-b7c04f4e3b02"
	const host = "metal-k8s-01"
	rm.preregister(uuid, host)
	vm := rm.powerOn(uuid, 2048)
	powerOn := time.Now()
	since := func(t0 time.Time) string { return time.Since(t0).Round(time.Second).String() }

	// 1. It provisions itself: kubeadm joins, the kubelet registers the
	// Node, and the provisioning rollout sees it Ready.
	var node *corev1.Node
	rm.eventually(vm, "the real kubelet registers Node "+host, 20*time.Minute, func() (bool, string) {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
		if err != nil {
			m, _ := rm.machine(uuid)
			return false, fmt.Sprintf("no Node yet (%v); machine %s at %d", err, m.Status, m.CurrentRevision)
		}
		node = n
		return true, ""
	})
	registered := time.Since(powerOn)
	if got := node.Status.NodeInfo.KubeletVersion; got != "v"+rmKubernetes {
		t.Errorf("the Node's kubelet is %s, want the pool's v%s", got, rmKubernetes)
	}
	for k, v := range map[string]string{"anvil.dev/gen": "1", "anvil.dev/metal": "true"} {
		if node.Labels[k] != v {
			t.Errorf("the Node's label %s = %q, want %q (labels %v)", k, node.Labels[k], v, node.Labels)
		}
	}
	if !hasTaint(node, taint) {
		t.Errorf("the Node lacks the pool's taint %v: %v", taint, node.Spec.Taints)
	}
	if _, kwok := node.Labels["kwok.x-k8s.io/node"]; kwok {
		t.Fatal("the Node is kwok's, not the kubelet's")
	}
	rm.eventually(vm, "the machine is ready at revision 1 and its Node Ready by its own kubelet", 15*time.Minute, func() (bool, string) {
		m, err := rm.machine(uuid)
		if err != nil {
			return false, err.Error()
		}
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node = n
		return m.Status == "ready" && m.CurrentRevision == 1 && kubeharness.NodeIsReady(n),
			fmt.Sprintf("machine %s at %d; node ready %v", m.Status, m.CurrentRevision, kubeharness.NodeIsReady(n))
	})
	firstReady := time.Since(powerOn)
	firstBootID := node.Status.NodeInfo.BootID
	t.Logf("Node %s: kubelet %s, runtime %s, kernel %s, OS %q, boot %s",
		host, node.Status.NodeInfo.KubeletVersion, node.Status.NodeInfo.ContainerRuntimeVersion,
		node.Status.NodeInfo.KernelVersion, node.Status.NodeInfo.OSImage, firstBootID)

	// 2. A Deployment with a budget runs on the real node: its pods tolerate
	// the pool's taint and are scheduled before any other node can take
	// them; the kwok nodes come after, as spare capacity for the drain.
	arts, err := kubeharness.LoadNodeArtifactsFrom(rm.nodeDir)
	rm.must(err)
	app := map[string]string{"app": "web"}
	replicas := int32(2)
	zero := int64(0)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: app},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: app},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name: "web", Image: arts.SleeperImage, ImagePullPolicy: corev1.PullNever,
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					}},
					TerminationGracePeriodSeconds: &zero,
				},
			},
		},
	}
	_, err = kube.Client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	rm.must(err)
	one := intstr.FromInt32(1)
	_, err = kube.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: app}, MinAvailable: &one},
	}, metav1.CreateOptions{})
	rm.must(err)
	podsOn := func(nodeName string) (running int, state string) {
		list, err := kube.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return 0, err.Error()
		}
		var parts []string
		for _, p := range list.Items {
			if p.Spec.NodeName == nodeName && p.Status.Phase == corev1.PodRunning && kubeharness.PodIsReady(&p) && p.DeletionTimestamp == nil {
				running++
			}
			parts = append(parts, fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, kubeharness.PodIsReady(&p)))
		}
		return running, strings.Join(parts, "; ")
	}
	rm.eventually(vm, "the Deployment's two pods run on the real node", 10*time.Minute, func() (bool, string) {
		n, state := podsOn(host)
		return n == 2, state
	})
	for _, name := range []string{"spare-1", "spare-2"} {
		_, err := kube.CreateNode(ctx, kubeharness.Node{Name: name})
		rm.must(err)
	}

	// 3. Save & Apply a new node label: a reboot-needing change.
	rm.updatePool("2", []client.Taint{taint})
	applied := time.Now()
	var ro client.Rollout
	cordonedSeen, drainedSeen := false, false
	rm.eventually(vm, "the rollout of revision 2 succeeds", 25*time.Minute, func() (bool, string) {
		if n, err := kube.Client.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{}); err == nil && n.Spec.Unschedulable {
			cordonedSeen = true
			if running, _ := podsOn(host); running == 0 {
				drainedSeen = true
			}
		}
		r, ok := rm.rolloutHolding(uuid, 2)
		if !ok {
			return false, "no rollout of revision 2 yet"
		}
		ro = r
		m, _ := rm.machine(uuid)
		return r.Status == "succeeded" && m.CurrentRevision == 2 && m.Status == "ready",
			fmt.Sprintf("rollout %s %s %s; machine %s at %d", r.ID, r.Status, r.Reason, m.Status, m.CurrentRevision)
	})
	rolledOut := time.Since(applied)
	if !cordonedSeen || !drainedSeen {
		t.Errorf("the test never saw the real node cordoned (%v) and empty (%v) during the rollout", cordonedSeen, drainedSeen)
	}

	// The Node rejoined after a reboot, is schedulable, and carries
	// revision 2's labels and the pool's taint.
	node, err = kube.Client.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
	rm.must(err)
	if node.Status.NodeInfo.BootID == firstBootID {
		t.Errorf("the Node's boot id is still %s: the kubelet did not re-register after a reboot", firstBootID)
	}
	if !kubeharness.NodeIsReady(node) || node.Spec.Unschedulable {
		t.Errorf("the Node is ready=%v unschedulable=%v after the rollout", kubeharness.NodeIsReady(node), node.Spec.Unschedulable)
	}
	if node.Labels["anvil.dev/gen"] != "2" {
		t.Errorf("the Node's label anvil.dev/gen = %q, want revision 2's \"2\"", node.Labels["anvil.dev/gen"])
	}
	if !hasTaint(node, taint) {
		t.Errorf("the Node lost the pool's taint: %v", node.Spec.Taints)
	}
	// The drained pods run elsewhere, and the budget was never broken: the
	// Deployment never had fewer than one available pod that the test saw.
	if n, state := podsOn(host); n != 0 {
		t.Logf("after the rollout %d pod(s) run on %s again: %s", n, host, state)
	}
	d, err := kube.Client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	rm.must(err)
	if d.Status.AvailableReplicas < 1 {
		t.Errorf("the Deployment has %d available replicas after the rollout", d.Status.AvailableReplicas)
	}

	// The operation log tells the story, step by step, for this machine.
	full, err := rm.api.GetOperationLog(ctx, ro.ID, 0, 1000)
	rm.must(err)
	var steps []string
	for _, e := range full.Entries {
		if e.Machine == uuid && e.Outcome == "succeeded" {
			steps = append(steps, e.Step)
		}
	}
	// wait_ready took the Node's readiness from the kubelet of the new boot,
	// not the Ready status left over from before the reboot.
	if !slices.ContainsFunc(full.Entries, func(e client.LogEntry) bool {
		return e.Machine == uuid && e.Step == "wait_ready" && e.Outcome == "succeeded" && strings.Contains(e.Message, "new boot")
	}) {
		t.Error("wait_ready did not wait for the kubelet of the new boot")
	}
	for _, want := range []string{"cordon", "drain", "reboot", "wait_boot", "wait_ready", "uncordon"} {
		if !slices.Contains(steps, want) {
			t.Errorf("the rollout's log has no succeeded %s step for the machine; it has %v", want, steps)
		}
	}
	var lines []string
	for _, e := range full.Entries {
		lines = append(lines, e.String())
	}
	t.Logf("the rollout's log:\n%s", strings.Join(lines, "\n"))

	// The audit trail names the same steps as events of the rollout.
	page, err := rm.api.ListEvents(ctx, client.EventFilter{Aggregate: "rollout/" + ro.ID, ListOptions: client.ListOptions{Limit: 500}})
	rm.must(err)
	types := map[string]int{}
	for _, e := range page.Items {
		types[e.Type]++
	}
	for _, want := range []string{"rollout.started", "rollout.step_succeeded", "rollout.reboot_requested", "rollout.succeeded"} {
		if types[want] == 0 {
			t.Errorf("the audit trail of rollout %s has no %s event: %v", ro.ID, want, types)
		}
	}
	t.Logf("power-on to Node registered %s, to ready at revision 1 %s; Save & Apply to rollout succeeded %s (%s since power-on); whole test %s",
		registered.Round(time.Second), firstReady.Round(time.Second), rolledOut.Round(time.Second), since(powerOn), since(rm.started))
}

func hasTaint(n *corev1.Node, want client.Taint) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == want.Key && t.Value == want.Value && string(t.Effect) == want.Effect
	})
}
