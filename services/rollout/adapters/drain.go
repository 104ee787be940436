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
	"k8s.io/kubectl/pkg/drain"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/app"
)

// drainRetry is how long the drain waits before it evicts again after a
// refusal, and between looks at pods that are terminating.
const drainRetry = 2 * time.Second

// Drain evicts the node's pods through the Eviction API until none is
// left (on a node that is not Ready: until every one is being deleted), or
// ctx ends. kubectl's drain package selects the pods (DaemonSet
// pods and mirror pods are left alone; pods without a controller and pods
// with emptyDir data are evicted too, as kubectl drain --force
// --delete-emptydir-data would); each eviction goes through the API
// server, so a PodDisruptionBudget holds: a refusal (429) is reported with
// the pod and the budget, and tried again.
func (c *cluster) Drain(ctx context.Context, name string, o app.DrainOptions) error {
	gp := -1
	if o.GracePeriod != nil {
		gp = int(o.GracePeriod.Seconds())
	}
	h := &drain.Helper{
		Ctx: ctx, Client: c.cs, Force: true, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		GracePeriodSeconds: gp, Out: io.Discard, ErrOut: io.Discard,
	}
	for {
		// Pods on a node that is not Ready never finish terminating (no
		// kubelet confirms it); as Cluster API does, such pods count as
		// gone once their deletion began.
		n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
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
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue // already going
			}
			err := h.EvictPod(p, policyv1.SchemeGroupVersion)
			switch {
			case err == nil, apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err):
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
