package app

import (
	"context"
	"fmt"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// CordonedByAnnotation names who cordoned a node: anvil's rollouts and
// operations set it, so that a later rollout knows it may uncordon it.
const CordonedByAnnotation = "anvil.dev/cordoned-by"

// setTarget points the machine at the rollout's revision in the registry,
// so that the machine boots it (idempotent there).
func (x *executor) setTarget(ctx context.Context, revision uint64) error {
	_, err := x.a.Registry.Command(ctx, x.d.org, x.act.Machine, regapi.SetTargetRevision{Revision: revision})
	return err
}

// cordon: set the target revision, then cordon the node.
func (x *executor) cordon(ctx context.Context) {
	x.retry(ctx, nil, func() (bool, error) {
		if err := x.setTarget(ctx, x.revision); err != nil {
			if permanent(err) {
				x.fail(ctx, "the registry refused to target the machine: "+err.Error())
				return true, nil
			}
			return false, err
		}
		cl, err := x.a.Clusters.Cluster(ctx, x.d.org, x.cluster)
		if err != nil {
			return false, err
		}
		n, err := cl.Cordon(ctx, x.act.Node, "rollout/"+x.d.id)
		if err != nil {
			if errs.KindOf(err) == errs.KindNotFound {
				x.fail(ctx, fmt.Sprintf("node %s does not exist in cluster %s", x.act.Node, x.cluster))
				return true, nil
			}
			return false, err
		}
		x.report(ctx, rollout.SucceedStep{Machine: x.act.Machine, Step: x.act.Step, Attempt: x.act.Attempt,
			Message: "node cordoned", NodeBootID: n.BootID})
		return true, nil
	})
}

// drain evicts the node's pods through the Eviction API; while a budget
// refuses, the log says which pod and budget, and how long it waited.
func (x *executor) drain(ctx context.Context) {
	x.retry(ctx, nil, func() (bool, error) {
		cl, err := x.a.Clusters.Cluster(ctx, x.d.org, x.cluster)
		if err != nil {
			return false, err
		}
		err = cl.Drain(ctx, x.act.Node, DrainOptions{
			GracePeriod: x.act.GracePeriod,
			Blocked: func(pod, budget, msg string) {
				x.report(ctx, rollout.RecordDrainBlocked{
					Machine: x.act.Machine, Attempt: x.act.Attempt, Pod: pod, Budget: budget,
					WaitedFor: x.a.now().Sub(x.stepStartedAt), Message: msg,
				})
			},
		})
		switch {
		case err == nil:
			x.succeed(ctx, "no evictable pod left")
			return true, nil
		case errs.KindOf(err) == errs.KindNotFound:
			// The node is gone: nothing runs there any more.
			x.succeed(ctx, "node "+x.act.Node+" no longer exists; nothing to drain")
			return true, nil
		case permanent(err):
			x.fail(ctx, "drain: "+err.Error())
			return true, nil
		}
		return false, err
	})
}

// waitReady waits until the node is Ready, woken by the node's changes.
func (x *executor) waitReady(ctx context.Context) {
	var cl Cluster
	var clErr error
	saidStale := false
	x.retry(ctx, func() <-chan struct{} {
		// The cluster is taken before the first read, so that a node that
		// is not Ready yet is waited for on its changes, not for a poll.
		if cl == nil {
			c, err := x.a.Clusters.Cluster(ctx, x.d.org, x.cluster)
			if err != nil {
				clErr = err
				return nil
			}
			cl = c
		}
		return cl.NodeChanged(x.act.Node)
	}, func() (bool, error) {
		if cl == nil {
			return false, clErr
		}
		n, err := cl.WatchedNode(ctx, x.act.Node)
		if err != nil {
			return false, err
		}
		if n.Found && n.Ready {
			if x.bootIDBefore != "" && n.BootID == x.bootIDBefore {
				// Still the status of the boot before the reboot: the
				// node-monitor grace period has not run out yet.
				if !saidStale {
					x.log.InfoContext(ctx, "waiting for the kubelet of the new boot: the Node's Ready status is from before the reboot", "boot_id", n.BootID)
					saidStale = true
				}
				return false, nil
			}
			msg := "node is Ready"
			if x.bootIDBefore != "" {
				msg = "node is Ready, reported by the kubelet of the new boot"
			}
			x.succeed(ctx, msg)
			return true, nil
		}
		return false, nil
	})
}

// uncordon makes the node schedulable again; for an abort's release it
// then points the registry back at the revision the machine runs.
func (x *executor) uncordon(ctx context.Context) {
	x.retry(ctx, nil, func() (bool, error) {
		cl, err := x.a.Clusters.Cluster(ctx, x.d.org, x.cluster)
		if err != nil {
			return false, err
		}
		var want *NodeConfig
		if !x.act.Release {
			w, err := x.nodeConfig(ctx)
			switch {
			case errs.KindOf(err) == errs.KindNotFound:
				// The machine or its pool is gone: only the uncordon is left.
				x.log.InfoContext(ctx, "node labels and taints left as they are", "reason", err.Error())
			case err != nil:
				return false, err
			default:
				want = &w
			}
		}
		if err := cl.Uncordon(ctx, x.act.Node, want); err != nil {
			return false, err
		}
		if x.act.Release && x.machine.CurrentRevision > 0 {
			if err := x.setTarget(ctx, x.machine.CurrentRevision); err != nil && !permanent(err) {
				return false, err
			}
		}
		if want == nil {
			x.succeed(ctx, "node uncordoned")
		} else {
			x.succeed(ctx, fmt.Sprintf("node uncordoned, with revision %d's labels and taints", x.revision))
		}
		return true, nil
	})
}

// nodeConfig is what the rollout's revision says the machine's node
// carries: the pool's node labels, overridden by the machine's own labels
// (as the rendered kubeadm join passes them), and the pool's taints.
func (x *executor) nodeConfig(ctx context.Context) (NodeConfig, error) {
	rev, err := x.a.Revisions.Revision(ctx, x.d.org, x.pool, int(x.revision))
	if err != nil {
		return NodeConfig{}, err
	}
	m, err := x.a.Registry.Machine(ctx, x.d.org, x.act.Machine)
	if err != nil {
		return NodeConfig{}, err
	}
	want := NodeConfig{Labels: revapi.NodeLabels(rev.Config.NodeLabels, m.Labels)}
	for _, t := range rev.Config.Taints {
		want.Taints = append(want.Taints, NodeTaint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return want, nil
}
