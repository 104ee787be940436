package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/checks"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// runChecks gathers the facts the sanity checks judge, and records the
// results. It touches nothing.
func (x *executor) runChecks(ctx context.Context) {
	x.retry(ctx, nil, func() (bool, error) {
		f, err := x.a.gatherFacts(ctx, x.d.org, &x.state)
		if err != nil {
			return false, err
		}
		x.report(ctx, rollout.RecordChecks{Results: checks.Evaluate(&x.state, f)})
		return true, nil
	})
}

// gatherFacts reads what the checks need: the cluster's API and version,
// the target revision's kubelet version, the other active rollouts, the
// registry's machines, the nodes and the PodDisruptionBudgets. A cluster
// that does not answer is a fact (the check fails), not an error; a
// service of ours that does not answer is an error (try again).
func (a *App) gatherFacts(ctx context.Context, org string, s *rollout.State) (checks.Facts, error) {
	var f checks.Facts
	rev, err := a.Revisions.Revision(ctx, org, s.Pool, int(s.Revision))
	if err != nil {
		return f, fmt.Errorf("reading revision %d of pool %s: %w", s.Revision, s.Pool, err)
	}
	f.KubeletVersion = rev.KubernetesVersion

	for _, h := range a.Rollouts.Active() {
		if h.Org != org || h.State.ID == s.ID {
			continue
		}
		hold := checks.Holder{Rollout: h.State.ID}
		for _, m := range h.State.Machines {
			hold.Machines = append(hold.Machines, m.UUID)
		}
		f.Holders = append(f.Holders, hold)
	}

	var nodes map[string]NodeInfo
	cl, err := a.Clusters.Cluster(ctx, org, s.Cluster)
	if err == nil {
		f.ControlPlaneVersion, err = cl.ServerVersion(ctx)
	}
	if err == nil {
		nodes, err = cl.Nodes(ctx)
	}
	if err != nil {
		f.ClusterError = err.Error()
	}

	known, err := a.registryMachines(ctx, org, s.Machines)
	if err != nil {
		return f, err
	}
	now := a.now()
	var hosts []string
	for _, m := range s.Machines {
		rm, ok := known[m.UUID]
		if !ok {
			continue // unknown to the registry: the check says so
		}
		fm := checks.Machine{UUID: m.UUID, Status: string(rm.Status), Online: rm.Connectivity == regapi.Online}
		if m.NoNode && !fm.Online && WaitingInBootLoop(rm, now) {
			// It waits in its iPXE boot loop, with no agent yet.
			fm.Online = true
		}
		if n, ok := nodes[m.Hostname]; ok {
			fm.NodeFound, fm.NodeReady, fm.Unschedulable, fm.CordonedByAnvil = n.Found, n.Ready, n.Unschedulable, n.CordonedByAnvil
		}
		f.Machines = append(f.Machines, fm)
		if !m.NoNode {
			hosts = append(hosts, m.Hostname)
		}
	}
	if cl != nil && f.ClusterError == "" && len(hosts) > 0 {
		if f.Budgets, err = cl.Budgets(ctx, hosts); err != nil {
			f.ClusterError = "listing PodDisruptionBudgets: " + err.Error()
		}
	}
	return f, nil
}

// checkReads is how many machines the checks read from the registry at
// once: one after the other, the 10,000 reads of a large rollout took
// 4.7 s before its first machine began.
const checkReads = 16

// registryMachines reads the rollout's machines from the registry,
// checkReads at a time. A machine the registry refuses for good (gone,
// or not in this organization) is left out; any other error is returned.
func (a *App) registryMachines(ctx context.Context, org string, ms []rollout.MachineState) (map[string]regapi.Machine, error) {
	var mu sync.Mutex
	known := make(map[string]regapi.Machine, len(ms))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(checkReads)
	for _, m := range ms {
		g.Go(func() error {
			rm, err := a.Registry.Machine(ctx, org, m.UUID)
			switch {
			case err == nil:
				mu.Lock()
				known[m.UUID] = rm
				mu.Unlock()
			case !permanent(err):
				return err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return known, nil
}

// waitForRollout waits until the rollout this one comes after succeeded
// or was aborted.
func (x *executor) waitForRollout(ctx context.Context) {
	after := x.act.Rollout
	x.retry(ctx, func() <-chan struct{} { return x.a.Notify.C(rolloutKey(x.d.org, after)) }, func() (bool, error) {
		snap, ok := x.a.Rollouts.Get(x.d.org, after)
		if !ok {
			return false, fmt.Errorf("rollout %s, which this one comes after, is not known (yet)", after)
		}
		switch st := snap.State.Status(); st {
		case rollout.StatusSucceeded, rollout.StatusAborted:
			x.report(ctx, rollout.ResolveDependency{Rollout: after, Outcome: st})
			return true, nil
		}
		return false, nil
	})
}

// ipxeGraceMin is the least slack given to firmware that said when it
// would ask again: DHCP, a slow link, a busy boot service.
const ipxeGraceMin = 30 * time.Second

// WaitingInBootLoop reports whether a machine with no agent is alive in
// its iPXE boot loop: it asked the boot service last at LastIPXEBootAt and
// was told to ask again by IPXERetryBy, and that time (plus a grace of a
// quarter of the interval, at least 30 s) has not passed. The boot
// service's back-off cap is thus the only setting: however long the
// firmware was told to sleep, it is not offline while it sleeps.
func WaitingInBootLoop(m regapi.Machine, now time.Time) bool {
	if m.LastIPXEBootAt.IsZero() || m.IPXERetryBy.IsZero() {
		return false
	}
	grace := max(ipxeGraceMin, m.IPXERetryBy.Sub(m.LastIPXEBootAt)/4)
	return !now.After(m.IPXERetryBy.Add(grace))
}
