package kubeharness

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Node labels the harness sets.
const (
	// KwokManagedLabel marks the nodes kwok plays the kubelet for. The
	// harness removes it to take a node away from kwok.
	KwokManagedLabel = "anvil.test/kwok-managed"
	// ControlPlaneLabel is the role label kubeadm gives control plane nodes.
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
)

// RebootingReason is the reason of the Ready=False condition that a
// kubelet's stand-in (the simulator) posts as its machine goes down for a
// reboot. kwok, as the harness runs it, leaves such a node NotReady (its
// node-initialize stage skips it) and keeps its lease and its pods: a node
// whose machine reboots within its lease. Whoever posted it reports Ready
// again when the machine is back; two writes a reboot, as a kubelet's.
const RebootingReason = "NodeRebooting"

// DefaultWaitTimeout bounds the helpers' waits when ctx has no deadline. It
// is generous because test machines are shared; it only matters on failure.
const DefaultWaitTimeout = 2 * time.Minute

// Node describes a node to create.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// ControlPlane adds ControlPlaneLabel and the NoSchedule taint that
	// kubeadm puts on control plane nodes.
	ControlPlane bool
	// Unschedulable creates the node cordoned.
	Unschedulable bool
}

// CreateNode creates a node that kwok keeps Ready, and waits until it is.
// Like a kubelet would, it sets the hostname, os and arch labels.
func (cp *ControlPlane) CreateNode(ctx context.Context, n Node) (*corev1.Node, error) {
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	maps.Copy(labels, n.Labels)
	labels[KwokManagedLabel] = "true"
	taints := append([]corev1.Taint(nil), n.Taints...)
	if n.ControlPlane {
		labels[ControlPlaneLabel] = ""
		taints = append(taints, corev1.Taint{Key: ControlPlaneLabel, Effect: corev1.TaintEffectNoSchedule})
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints, Unschedulable: n.Unschedulable},
	}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create node %s: %w", n.Name, err)
	}
	return cp.WaitNodeReady(ctx, n.Name, true)
}

// WaitNodeReady waits until the node's Ready condition is True (ready) or
// anything else (!ready), and returns the node as last seen.
func (cp *ControlPlane) WaitNodeReady(ctx context.Context, name string, ready bool) (*corev1.Node, error) {
	var node *corev1.Node
	err := cp.waitFor(ctx, fmt.Sprintf("node %s Ready=%t", name, ready), func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = n
		return NodeIsReady(n) == ready, nil
	})
	return node, err
}

// NodeIsReady reports whether the node's Ready condition is True.
func NodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetNodeNotReady makes a node look like one whose kubelet reports
// NotReady and then goes quiet: kwok stops managing it (no lease renewals,
// no pod status, no pod deletion) and its Ready condition becomes False.
// kube-controller-manager then reacts as in a real cluster: it taints the
// node not-ready, turns the condition to Unknown once the lease is older
// than its grace period (50s), and evicts pods whose toleration runs out
// (300s by default). Pods keep the status they had; a pod deleted or
// evicted from the node stays Terminating until SetNodeReady, as with a
// dead kubelet.
func (cp *ControlPlane) SetNodeNotReady(ctx context.Context, name string) error {
	if err := cp.patchNodeLabel(ctx, name, nil); err != nil {
		return err
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cond := corev1.NodeCondition{
			Type:               corev1.NodeReady,
			Status:             corev1.ConditionFalse,
			Reason:             "KubeletNotReady",
			Message:            "made NotReady by kubeharness",
			LastHeartbeatTime:  now,
			LastTransitionTime: now,
		}
		found := false
		for i, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				node.Status.Conditions[i], found = cond, true
			}
		}
		if !found {
			node.Status.Conditions = append(node.Status.Conditions, cond)
		}
		_, err = cp.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("set node %s NotReady: %w", name, err)
	}
	_, err = cp.WaitNodeReady(ctx, name, false)
	return err
}

// SetNodeReady hands a node back to kwok and waits until kwok reports it
// Ready. kwok then also finishes deleting the node's Terminating pods.
func (cp *ControlPlane) SetNodeReady(ctx context.Context, name string) error {
	v := "true"
	if err := cp.patchNodeLabel(ctx, name, &v); err != nil {
		return err
	}
	_, err := cp.WaitNodeReady(ctx, name, true)
	return err
}

// DeleteNode deletes a node and waits until it is gone. Its pods are left to
// kube-controller-manager's pod garbage collector, as in a real cluster.
func (cp *ControlPlane) DeleteNode(ctx context.Context, name string) error {
	err := cp.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	return cp.waitFor(ctx, "node "+name+" deleted", func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// patchNodeLabel sets KwokManagedLabel to *value, or removes it if nil.
func (cp *ControlPlane) patchNodeLabel(ctx context.Context, name string, value *string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]*string{KwokManagedLabel: value}},
	})
	if err != nil {
		return err
	}
	if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s: %w", name, err)
	}
	return nil
}

// waitFor polls cond every 100ms until it returns true or an error, or the
// wait times out. what names the awaited state in the error.
func (cp *ControlPlane) waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultWaitTimeout)
		defer cancel()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err := cp.checkAlive(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
