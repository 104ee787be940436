package adapters

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/anvil-fleet/anvil/services/rollout/app"
)

// ManagedNodeConfigAnnotation records the label keys and taints (key and
// effect) anvil last put on a node, so that the next revision removes the
// ones it dropped and leaves everyone else's alone.
const ManagedNodeConfigAnnotation = "anvil.dev/managed-node-config"

type managedNodeConfig struct {
	Labels []string `json:"labels,omitempty"`
	Taints []string `json:"taints,omitempty"` // key:effect
}

func taintID(key, effect string) string { return key + ":" + effect }

// applyNodeConfig changes n to carry want, and reports whether it changed.
func applyNodeConfig(n *corev1.Node, want app.NodeConfig) bool {
	var before managedNodeConfig
	if s, ok := n.Annotations[ManagedNodeConfigAnnotation]; ok {
		_ = json.Unmarshal([]byte(s), &before) // unreadable: as if nothing was managed
	}
	changed := false
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for _, k := range before.Labels {
		if _, keep := want.Labels[k]; !keep {
			if _, ok := n.Labels[k]; ok {
				delete(n.Labels, k)
				changed = true
			}
		}
	}
	for k, v := range want.Labels {
		if old, ok := n.Labels[k]; !ok || old != v {
			n.Labels[k] = v
			changed = true
		}
	}

	wanted := map[string]app.NodeTaint{}
	for _, t := range want.Taints {
		wanted[taintID(t.Key, t.Effect)] = t
	}
	dropped := map[string]bool{}
	for _, id := range before.Taints {
		if _, keep := wanted[id]; !keep {
			dropped[id] = true
		}
	}
	taints := make([]corev1.Taint, 0, len(n.Spec.Taints)+len(want.Taints))
	seen := map[string]bool{}
	for _, t := range n.Spec.Taints {
		id := taintID(t.Key, string(t.Effect))
		if dropped[id] {
			changed = true
			continue
		}
		if w, ok := wanted[id]; ok {
			seen[id] = true
			if t.Value != w.Value {
				t.Value = w.Value
				changed = true
			}
		}
		taints = append(taints, t)
	}
	for _, t := range want.Taints {
		if id := taintID(t.Key, t.Effect); !seen[id] {
			seen[id] = true
			taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
			changed = true
		}
	}
	n.Spec.Taints = taints

	after := managedNodeConfig{Labels: slices.Sorted(maps.Keys(want.Labels)), Taints: slices.Sorted(maps.Keys(wanted))}
	b, _ := json.Marshal(after)
	if n.Annotations[ManagedNodeConfigAnnotation] != string(b) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[ManagedNodeConfigAnnotation] = string(b)
		changed = true
	}
	return changed
}

func (c *cluster) ReconcileNode(ctx context.Context, name string, want app.NodeConfig) error {
	// The watch's copy says whether anything is to change, which for most
	// rollouts nothing is; a change is made on a fresh read.
	if n, err := c.node(ctx, name); err == nil && !applyNodeConfig(n.DeepCopy(), want) {
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !applyNodeConfig(n, want) {
			return nil
		}
		_, err = c.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: "anvil-rollout"})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return kubeErr("setting node "+name+"'s labels and taints", err)
}
