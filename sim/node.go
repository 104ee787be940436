package sim

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
)

// kubeAttempts bounds the retries of one Kubernetes operation; a failure is
// reported as an EventError and the machine carries on.
const kubeAttempts = 8

// RebootingReason is the reason of the Ready=False condition the simulator
// posts when a machine goes down for a reboot; kwok, as libs/kubeharness
// runs it, leaves such a node NotReady (kubeharness.RebootingReason).
const RebootingReason = "NodeRebooting"

// reconcileNode makes the Node of this boot what it should be: created if
// missing, with the kubelet's standard labels, the labels and taints from
// Ignition, and either handed to kwok (which keeps it Ready) or, when the
// machine never joins, NotReady. A Node that kwok kept through a reboot is
// only reported Ready again, in one patch of its status, as a kubelet that
// comes back does: a kubelet applies its --node-labels and registration
// taints only to a Node it creates, so a new revision's labels are not put
// on an existing Node here (the rollout puts them there as it uncordons).
// A Node that kwok let go of (a reboot that hung, a machine that never
// joins) is registered again in one patch, which, unlike a kubelet's,
// also sets the labels from Ignition (as the simulator always did there).
func (m *Machine) reconcileNode(ctx context.Context, bc *BootConfig) {
	kube := m.fleet.cfg.Kube
	if kube == nil {
		return
	}
	m.mu.Lock()
	join := !m.neverJoin
	prevName, prevApplied := m.nodeName, m.applied
	rebooting := m.rebooting && m.kwokKept && prevName == bc.NodeName
	renamed := m.rebooting && m.kwokKept && prevName != "" && prevName != bc.NodeName
	m.mu.Unlock()
	if renamed && m.releaseNode(ctx, prevName) {
		// Back under another name: the old Node's kubelet is gone for good.
		m.mu.Lock()
		m.kwokKept, m.rebooting = false, false
		m.mu.Unlock()
	}

	labels := map[string]string{
		"kubernetes.io/hostname": bc.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	maps.Copy(labels, bc.NodeLabels)
	if join && rebooting {
		gone, err := m.setReady(ctx, bc.NodeName)
		if err != nil {
			m.emit(EventError, fmt.Sprintf("node %s Ready: %v", bc.NodeName, err))
			return
		}
		if !gone {
			m.nodeUp(bc.NodeName, "node "+bc.NodeName+" Ready again")
			return
		}
		// Deleted meanwhile: registered again below.
	}
	// As a kubelet that registers: the Node of a machine that booted
	// before is patched in one call; only a missing one is created.
	var patched *corev1.Node
	err := m.kubeRetry(ctx, func() error {
		// Labels the simulator set on this node before and that Ignition no
		// longer gives are removed; everything else on the node is kept.
		patch := map[string]*string{}
		if prevName == bc.NodeName {
			for k := range prevApplied {
				if _, ok := labels[k]; !ok {
					patch[k] = nil
				}
			}
		}
		for k, v := range labels {
			patch[k] = &v
		}
		if join {
			patch[m.fleet.cfg.KwokLabel] = new("true")
		} else {
			patch[m.fleet.cfg.KwokLabel] = nil
		}
		node, err := m.patchLabels(ctx, bc.NodeName, patch)
		if !apierrors.IsNotFound(err) {
			patched = node
			return err
		}
		create := maps.Clone(labels)
		if join {
			create[m.fleet.cfg.KwokLabel] = "true"
		}
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: bc.NodeName, Labels: create},
			Spec:       corev1.NodeSpec{Taints: bc.Taints},
		}
		_, err = kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		return err // AlreadyExists: raced with another writer, go round again
	})
	if err != nil {
		m.emit(EventError, fmt.Sprintf("node %s: %v", bc.NodeName, err))
		return
	}
	m.mu.Lock()
	m.nodeName, m.applied, m.kwokKept = bc.NodeName, labels, join
	if !join {
		m.rebooting = false
	}
	m.mu.Unlock()
	if !join {
		m.setNotReady(ctx, bc.NodeName, "KubeletNotReady", "simulated: the node never joins")
		return
	}
	if patched != nil && readyReason(patched) == RebootingReason {
		// kwok leaves a node that reports RebootingReason alone: this one
		// rebooted before this simulator started.
		if _, err := m.setReady(ctx, bc.NodeName); err != nil {
			m.emit(EventError, fmt.Sprintf("node %s Ready: %v", bc.NodeName, err))
			return
		}
	}
	m.nodeUp(bc.NodeName, "node "+bc.NodeName+" handed to kwok")
}

// readyReason is the reason of the node's Ready condition.
func readyReason(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Reason
		}
	}
	return ""
}

// setReady reports the node Ready, as a kubelet that is back; gone if
// there is no such node (not retried: a missing node is registered anew).
func (m *Machine) setReady(ctx context.Context, name string) (gone bool, err error) {
	err = m.kubeRetry(ctx, func() error {
		err := m.patchReady(ctx, name, m.readyCondition())
		if apierrors.IsNotFound(err) {
			gone = true
			return nil
		}
		return err
	})
	return gone, err
}

// nodeUp records the Node Ready (as the simulator made or left it).
func (m *Machine) nodeUp(name, message string) {
	m.mu.Lock()
	m.nodeReady, m.rebooting = true, false
	m.mu.Unlock()
	m.emit(EventNodeReady, message)
}

// nodeRebooting reports the Node NotReady as a kubelet whose machine goes
// down for a reboot: one patch of its Ready condition, with
// RebootingReason. kwok keeps the node's lease and pods meanwhile, as for a
// machine back within its lease.
func (m *Machine) nodeRebooting(ctx context.Context) {
	if m.fleet.cfg.Kube == nil {
		return
	}
	m.mu.Lock()
	name := m.nodeName
	m.mu.Unlock()
	if name == "" {
		return
	}
	if m.setNotReady(ctx, name, RebootingReason, "simulated: rebooting") {
		m.mu.Lock()
		m.rebooting = true
		m.mu.Unlock()
	}
}

// nodeDown makes the Node look like one whose kubelet went away, as
// kubeharness.SetNodeNotReady does: kwok stops managing it (its label goes,
// and with it the lease's renewals) and its Ready condition turns False.
func (m *Machine) nodeDown(ctx context.Context, why string) {
	if m.fleet.cfg.Kube == nil {
		return
	}
	m.mu.Lock()
	name := m.nodeName
	m.mu.Unlock()
	if name == "" {
		return
	}
	if !m.releaseNode(ctx, name) {
		return
	}
	m.mu.Lock()
	m.kwokKept = false
	m.mu.Unlock()
	m.setNotReady(ctx, name, "KubeletNotReady", "simulated: "+why)
}

// releaseNode takes the Node from kwok (its label goes): no more lease
// renewals, no more pod handling. False if that failed (reported).
func (m *Machine) releaseNode(ctx context.Context, name string) bool {
	err := m.kubeRetry(ctx, func() error {
		_, err := m.patchLabels(ctx, name, map[string]*string{m.fleet.cfg.KwokLabel: nil})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		m.emit(EventError, fmt.Sprintf("node %s: %v", name, err))
		return false
	}
	return true
}

// setNotReady sets the node's Ready condition to False for reason, in one
// patch of the status (conditions merge by type, as the kubelet's do). Its
// transition time is set only when the simulator had the node Ready;
// otherwise the one already there stands. False if the patch failed.
func (m *Machine) setNotReady(ctx context.Context, name, reason, message string) bool {
	m.mu.Lock()
	wasReady := m.nodeReady
	m.mu.Unlock()
	now := metav1.Now()
	cond := map[string]any{"type": corev1.NodeReady, "status": corev1.ConditionFalse, "reason": reason,
		"message": message, "lastHeartbeatTime": now}
	if wasReady {
		cond["lastTransitionTime"] = now
	}
	err := m.kubeRetry(ctx, func() error {
		err := m.patchReady(ctx, name, cond)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	m.mu.Lock()
	m.nodeReady = false
	m.mu.Unlock()
	if err != nil {
		m.emit(EventError, fmt.Sprintf("node %s NotReady: %v", name, err))
		return false
	}
	m.emit(EventNodeNotReady, "node "+name+": "+message)
	return true
}

// readyCondition is the Ready condition of a kubelet that is back.
func (m *Machine) readyCondition() map[string]any {
	now := metav1.Now()
	return map[string]any{"type": corev1.NodeReady, "status": corev1.ConditionTrue, "reason": "KubeletReady",
		"message": "simulated: kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}
}

// patchReady sets the node's Ready condition in one strategic merge patch
// of its status.
func (m *Machine) patchReady(ctx context.Context, name string, cond map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	if err != nil {
		return err
	}
	_, err = m.fleet.cfg.Kube.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func (m *Machine) patchLabels(ctx context.Context, name string, labels map[string]*string) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return nil, err
	}
	return m.fleet.cfg.Kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// kubeRetry runs op until it succeeds, ctx ends, or kubeAttempts failed.
func (m *Machine) kubeRetry(ctx context.Context, op func() error) error {
	delay := 100 * time.Millisecond
	var err error
	for attempt := 1; attempt <= kubeAttempts; attempt++ {
		if err = op(); err == nil || ctx.Err() != nil {
			return err
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
	return err
}
