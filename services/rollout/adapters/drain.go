package adapters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/drain"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/app"
)

// drainRetry is how long the drain waits before it evicts again after a
// refusal, and between looks at pods that are terminating.
const drainRetry = 2 * time.Second

// redriveWindow is how old a budget's disruptedPods entry may be for the
// drain to finish that eviction itself. The disruption controller forgets
// an entry after its DeletionTimeout (2m), and from then on counts the pod
// as healthy again; the 30s margin keeps clock skew between this process
// and the control plane, and the delete's own latency, from ever turning a
// forgotten (unpaid) disruption into a deletion. An older entry is left to
// expire, as before.
const redriveWindow = 90 * time.Second

// redriveMessage is logged for each eviction the drain finishes itself.
const redriveMessage = "re-driving an eviction the budget already counted; a previous eviction call was cut off"

// Drain evicts the node's pods through the Eviction API until none is
// left (on a node that is not Ready: until every one is being deleted), or
// ctx ends. kubectl's drain package selects the pods (DaemonSet
// pods and mirror pods are left alone; pods without a controller and pods
// with emptyDir data are evicted too, as kubectl drain --force
// --delete-emptydir-data would); each eviction goes through the API
// server, so a PodDisruptionBudget holds: a refusal (429) is reported with
// the pod and the budget, and tried again.
//
// An eviction call cut off between the API server's two writes (the pod
// recorded in the budget's status.disruptedPods, then deleted), e.g. when
// the process was killed and another took the drain over, leaves the pod
// running and the budget spent until the disruption controller gives up on
// it two minutes later; every eviction the budget covers is refused
// meanwhile. So before evicting (at the start, and again after a refusal)
// the drain deletes such pods itself: see redriveCutOffEvictions.
func (c *cluster) Drain(ctx context.Context, name string, o app.DrainOptions) error {
	gp := -1
	if o.GracePeriod != nil {
		gp = int(o.GracePeriod.Seconds())
	}
	h := &drain.Helper{
		Ctx: ctx, Client: c.cs, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		GracePeriodSeconds: gp, Out: io.Discard, ErrOut: io.Discard,
	}
	redrive := true
	for {
		// Pods on a node that is not Ready never finish terminating (no
		// kubelet confirms it); as Cluster API does, such pods count as
		// gone once their deletion began.
		n, err := c.node(ctx, name)
		if err != nil {
			return kubeErr("reading node "+name, err)
		}
		h.SkipWaitForDeleteTimeoutSeconds = 0
		if !nodeInfo(n).Ready {
			h.SkipWaitForDeleteTimeoutSeconds = 1
		}
		list, errList := h.GetPodsForDeletion(name)
		if len(errList) > 0 {
			return errs.Conflict("these pods cannot be drained: %v", errors.Join(errList...))
		}
		pods := list.Pods()
		if len(pods) == 0 {
			return nil
		}
		var redriven map[types.UID]bool
		if redrive {
			redriven = c.redriveCutOffEvictions(ctx, name, pods, o.GracePeriod)
			redrive = false
		}
		for _, p := range pods {
			if p.DeletionTimestamp != nil || redriven[p.UID] {
				continue // already going
			}
			err := h.EvictPod(p, policyv1.SchemeGroupVersion)
			switch {
			case err == nil, apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err):
				// Perhaps a cut-off eviction holds the budget: look again
				// before the next pass.
				redrive = true
				if o.Blocked != nil {
					o.Blocked(p.Namespace+"/"+p.Name, c.budgetOf(ctx, &p), evictionMessage(err))
				}
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				c.log.Debug("eviction failed; trying again", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(drainRetry):
		}
	}
}

// redriveCutOffEvictions deletes the pods of node whose eviction a covering
// budget has already counted (see cutOffEvictions), with the drain's grace
// period, logs each, and returns the ones it deleted or found gone. It only
// does what the cut-off eviction call would have done next, so it never
// spends a budget. It is idempotent: a pod being deleted is not listed
// again, and a pod already gone, or replaced by a namesake (the UID
// precondition), is left alone. A failure is logged and the drain goes on
// evicting; the entry then expires as it would have without this.
func (c *cluster) redriveCutOffEvictions(ctx context.Context, node string, pods []corev1.Pod, grace *time.Duration) map[types.UID]bool {
	var budgets []policyv1.PodDisruptionBudget
	listed := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || listed[p.Namespace] {
			continue
		}
		listed[p.Namespace] = true
		list, err := c.cs.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.log.Debug("listing budgets to re-drive cut-off evictions failed", "node", node, "namespace", p.Namespace, "err", err)
			continue
		}
		budgets = append(budgets, list.Items...)
	}
	done := map[types.UID]bool{}
	for _, r := range cutOffEvictions(node, pods, budgets, time.Now()) {
		uid := r.pod.UID
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
		if grace != nil {
			opts.GracePeriodSeconds = new(int64(grace.Seconds()))
		}
		pod := r.pod.Namespace + "/" + r.pod.Name
		err := c.cs.CoreV1().Pods(r.pod.Namespace).Delete(ctx, r.pod.Name, opts)
		switch {
		case err == nil:
			c.log.Info(redriveMessage, "node", node, "pod", pod, "budget", r.budget, "evicted_at", r.at)
			done[uid] = true
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or another pod by that name now: nothing to finish.
			done[uid] = true
		case ctx.Err() != nil:
			return done
		default:
			c.log.Warn("re-driving a cut-off eviction failed; evicting as usual", "node", node, "pod", pod, "budget", r.budget, "err", err)
		}
	}
	return done
}

// cutOff is a pod whose eviction a budget counted but that was not deleted.
type cutOff struct {
	pod    corev1.Pod
	budget string // namespace/name of the budget(s) that list the pod
	at     time.Time
}

// cutOffEvictions picks, among the pods the drain of node would evict, those
// that a budget whose selector matches the pod lists in
// status.disruptedPods, less than redriveWindow before now, and that are not
// being deleted: the eviction was granted and paid for, the deletion never
// came. A pod created after the entry is a namesake of the evicted one (a
// StatefulSet's replacement) and is not picked, nor is a pod of another
// node or namespace.
func cutOffEvictions(node string, pods []corev1.Pod, budgets []policyv1.PodDisruptionBudget, now time.Time) []cutOff {
	var out []cutOff
	for _, p := range pods {
		if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
			continue
		}
		var names []string
		var at time.Time
		for _, b := range budgets {
			if b.Namespace != p.Namespace {
				continue
			}
			t, ok := b.Status.DisruptedPods[p.Name]
			if !ok || now.Sub(t.Time) >= redriveWindow || p.CreationTimestamp.After(t.Time) {
				continue
			}
			// A nil selector matches nothing; an empty one every pod of
			// the namespace, as the Eviction API reads it.
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			names = append(names, b.Namespace+"/"+b.Name)
			if t.After(at) {
				at = t.Time
			}
		}
		if len(names) > 0 {
			out = append(out, cutOff{pod: p, budget: strings.Join(names, ","), at: at})
		}
	}
	return out
}

// budgetOf names the PodDisruptionBudget that covers pod ("" if none is
// found: the refusal came from something else).
func (c *cluster) budgetOf(ctx context.Context, pod *corev1.Pod) string {
	list, err := c.cs.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var names []string
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			names = append(names, b.Namespace+"/"+b.Name)
		}
	}
	return strings.Join(names, ",")
}

func evictionMessage(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		msg := s.Message
		if s.Details != nil {
			for _, cause := range s.Details.Causes {
				if cause.Message != "" {
					msg += "; " + cause.Message
				}
			}
		}
		return msg
	}
	return fmt.Sprint(err)
}
