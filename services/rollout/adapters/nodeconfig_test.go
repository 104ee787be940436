package adapters

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/services/rollout/app"
)

func TestApplyNodeConfig(t *testing.T) {
	managed := func(s string) map[string]string { return map[string]string{ManagedNodeConfigAnnotation: s} }
	node := func(labels, ann map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: ann}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	taint := func(k, v, e string) corev1.Taint {
		return corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(e)}
	}
	for _, tc := range []struct {
		name        string
		in          *corev1.Node
		want        app.NodeConfig
		wantLabels  map[string]string
		wantTaints  []corev1.Taint
		wantChanged bool
	}{{
		name:       "a fresh node keeps the kubelet's labels and gains the revision's",
		in:         node(map[string]string{"kubernetes.io/hostname": "n", "gen": "1"}, nil),
		want:       app.NodeConfig{Labels: map[string]string{"gen": "2"}, Taints: []app.NodeTaint{{Key: "dedicated", Value: "metal", Effect: "NoSchedule"}}},
		wantLabels: map[string]string{"kubernetes.io/hostname": "n", "gen": "2"},
		wantTaints: []corev1.Taint{taint("dedicated", "metal", "NoSchedule")}, wantChanged: true,
	}, {
		name: "labels and taints anvil set and the revision dropped go; others stay",
		in: node(map[string]string{"kubernetes.io/hostname": "n", "gen": "1", "old": "x", "theirs": "y"}, managed(`{"labels":["gen","old"],"taints":["dedicated:NoSchedule"]}`),
			taint("dedicated", "metal", "NoSchedule"), taint("node.kubernetes.io/unschedulable", "", "NoSchedule")),
		want:        app.NodeConfig{Labels: map[string]string{"gen": "2"}},
		wantLabels:  map[string]string{"kubernetes.io/hostname": "n", "gen": "2", "theirs": "y"},
		wantTaints:  []corev1.Taint{taint("node.kubernetes.io/unschedulable", "", "NoSchedule")},
		wantChanged: true,
	}, {
		name:        "a taint's value follows the revision",
		in:          node(nil, managed(`{"taints":["dedicated:NoSchedule"]}`), taint("dedicated", "a", "NoSchedule")),
		want:        app.NodeConfig{Taints: []app.NodeTaint{{Key: "dedicated", Value: "b", Effect: "NoSchedule"}}},
		wantLabels:  map[string]string{},
		wantTaints:  []corev1.Taint{taint("dedicated", "b", "NoSchedule")},
		wantChanged: true,
	}, {
		name:       "already as the revision says: no change",
		in:         node(map[string]string{"gen": "2"}, managed(`{"labels":["gen"],"taints":["dedicated:NoSchedule"]}`), taint("dedicated", "m", "NoSchedule")),
		want:       app.NodeConfig{Labels: map[string]string{"gen": "2"}, Taints: []app.NodeTaint{{Key: "dedicated", Value: "m", Effect: "NoSchedule"}}},
		wantLabels: map[string]string{"gen": "2"},
		wantTaints: []corev1.Taint{taint("dedicated", "m", "NoSchedule")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			changed := applyNodeConfig(tc.in, tc.want)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if len(tc.in.Labels) != len(tc.wantLabels) {
				t.Errorf("labels %v, want %v", tc.in.Labels, tc.wantLabels)
			}
			for k, v := range tc.wantLabels {
				if tc.in.Labels[k] != v {
					t.Errorf("label %s = %q, want %q (all: %v)", k, tc.in.Labels[k], v, tc.in.Labels)
				}
			}
			if len(tc.in.Spec.Taints) != len(tc.wantTaints) {
				t.Fatalf("taints %v, want %v", tc.in.Spec.Taints, tc.wantTaints)
			}
			for i := range tc.wantTaints {
				if tc.in.Spec.Taints[i] != tc.wantTaints[i] {
					t.Errorf("taint %d = %v, want %v", i, tc.in.Spec.Taints[i], tc.wantTaints[i])
				}
			}
			if again := applyNodeConfig(tc.in, tc.want); again {
				t.Error("a second apply changed the node again")
			}
		})
	}
}

func TestUncordonPatch(t *testing.T) {
	taint := func(k, v string) corev1.Taint {
		return corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffectNoSchedule}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "42",
		Labels:      map[string]string{"gen": "1", "old": "x", "theirs": "y"},
		Annotations: map[string]string{ManagedNodeConfigAnnotation: `{"labels":["gen","old"],"taints":["dedicated:NoSchedule"]}`, app.CordonedByAnnotation: "rollout/r1"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{taint("dedicated", "m")}}}
	for _, tc := range []struct {
		name string
		want *app.NodeConfig
		// The patch as JSON (encoding/json sorts map keys).
		patch string
	}{{
		name:  "a release only uncordons",
		patch: `{"metadata":{"annotations":{"anvil.dev/cordoned-by":null}},"spec":{"unschedulable":null}}`,
	}, {
		name: "nothing of the revision to change: its labels are sent as they are, in case the copy is behind",
		want: &app.NodeConfig{Labels: map[string]string{"gen": "1", "old": "x"}, Taints: []app.NodeTaint{{Key: "dedicated", Value: "m", Effect: "NoSchedule"}}},
		patch: `{"metadata":{"annotations":{"anvil.dev/cordoned-by":null,"anvil.dev/managed-node-config":"{\"labels\":[\"gen\",\"old\"],\"taints\":[\"dedicated:NoSchedule\"]}"},` +
			`"labels":{"gen":"1","old":"x"}},"spec":{"unschedulable":null}}`,
	}, {
		name: "labels merge key by key: no precondition",
		want: &app.NodeConfig{Labels: map[string]string{"gen": "2"}, Taints: []app.NodeTaint{{Key: "dedicated", Value: "m", Effect: "NoSchedule"}}},
		patch: `{"metadata":{"annotations":{"anvil.dev/cordoned-by":null,"anvil.dev/managed-node-config":"{\"labels\":[\"gen\"],\"taints\":[\"dedicated:NoSchedule\"]}"},` +
			`"labels":{"gen":"2","old":null}},"spec":{"unschedulable":null}}`,
	}, {
		name: "a taint's change sends the whole list, on the copy's version",
		want: &app.NodeConfig{Taints: []app.NodeTaint{{Key: "dedicated", Value: "metal", Effect: "NoSchedule"}}},
		patch: `{"metadata":{"annotations":{"anvil.dev/cordoned-by":null,"anvil.dev/managed-node-config":"{\"taints\":[\"dedicated:NoSchedule\"]}"},` +
			`"labels":{"gen":null,"old":null},"resourceVersion":"42"},` +
			`"spec":{"taints":[{"key":"dedicated","value":"metal","effect":"NoSchedule"}],"unschedulable":null}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := node.DeepCopy()
			patch, err := uncordonPatch(node, tc.want)
			must(t, err)
			if string(patch) != tc.patch {
				t.Errorf("patch\n %s\nwant\n %s", patch, tc.patch)
			}
			if !equality.Semantic.DeepEqual(node, before) {
				t.Error("the node it was computed from changed")
			}
		})
	}
}
