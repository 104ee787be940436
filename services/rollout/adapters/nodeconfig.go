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

// Uncordon implements app.Cluster: one merge patch marks the node
// schedulable, drops the cordon note and, with want, gives it the
// revision's labels and taints. It is computed from the watch's copy,
// which is no older than the Ready status wait_ready saw on the same watch
// after the reboot, hence newer than anvil's own last write of the node's
// labels and taints (which labels anvil set, and so may remove, comes from
// the copy's annotation). Every wanted label and the annotation are sent
// whatever the copy says, so that a value someone changed since is set
// again; only a change of taints (a list the API server replaces whole)
// carries the copy's resourceVersion, and a conflict computes the patch
// again from a fresh read.
func (c *cluster) Uncordon(ctx context.Context, name string, want *app.NodeConfig) error {
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n *corev1.Node
		var err error
		if fresh {
			n, err = c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		} else {
			n, err = c.node(ctx, name)
		}
		fresh = true
		if err != nil {
			return err
		}
		patch, err := uncordonPatch(n, want)
		if err != nil {
			return err
		}
		_, err = c.patchNode(ctx, name, string(patch))
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	what := "uncordoning node " + name
	if want != nil {
		what += " with its revision's labels and taints"
	}
	return kubeErr(what, err)
}

// uncordonPatch is the merge patch that uncordons n and, with want, makes
// it carry want (as applyNodeConfig would change it).
func uncordonPatch(n *corev1.Node, want *app.NodeConfig) ([]byte, error) {
	annotations := map[string]any{app.CordonedByAnnotation: nil}
	spec := map[string]any{"unschedulable": nil}
	meta := map[string]any{"annotations": annotations}
	if want != nil {
		after := n.DeepCopy()
		applyNodeConfig(after, *want)
		labels := map[string]any{}
		for k := range n.Labels {
			if _, ok := after.Labels[k]; !ok {
				labels[k] = nil
			}
		}
		for k, v := range want.Labels {
			labels[k] = v
		}
		if len(labels) > 0 {
			meta["labels"] = labels
		}
		annotations[ManagedNodeConfigAnnotation] = after.Annotations[ManagedNodeConfigAnnotation]
		if !slices.EqualFunc(n.Spec.Taints, after.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
			spec["taints"] = after.Spec.Taints
			meta["resourceVersion"] = n.ResourceVersion
		}
	}
	return json.Marshal(map[string]any{"metadata": meta, "spec": spec})
}
