// Package checks evaluates a rollout's sanity checks from facts that the
// service layer gathered (the cluster's API, the registry, the other
// rollouts, the PodDisruptionBudgets). It is pure: the gathering is I/O
// and lives in the service's adapters; the judgement lives here, so that it
// is tested and the same everywhere. Its results go into
// rollout.RecordChecks; any failure fails the rollout before anything is
// touched, with every reason.
package checks

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Facts are what the service found just before the rollout would move.
type Facts struct {
	// ClusterError is why the cluster's API did not answer with the
	// stored credentials; empty if it did.
	ClusterError string `json:"cluster_error,omitempty"`
	// ControlPlaneVersion is the API server's version (x.y.z);
	// KubeletVersion the target revision's kubernetes.version.
	ControlPlaneVersion string `json:"control_plane_version,omitempty"`
	KubeletVersion      string `json:"kubelet_version,omitempty"`
	// Holders are the other active rollouts (rollout.State.Active) and
	// their machines.
	Holders []Holder `json:"holders,omitempty"`
	// Machines are the registry's and the cluster's view of each machine.
	Machines []Machine `json:"machines,omitempty"`
	// Budgets are the cluster's PodDisruptionBudgets that cover pods on
	// the rollout's nodes.
	Budgets []Budget `json:"budgets,omitempty"`
}

// Holder is another active rollout.
type Holder struct {
	Rollout  string   `json:"rollout"`
	Machines []string `json:"machines"` // UUIDs
}

// Machine is what is known about one machine of the rollout.
type Machine struct {
	UUID   string `json:"uuid"`
	Status string `json:"status"` // the registry's lifecycle status
	Online bool   `json:"online"` // the registry's connectivity
	// The node, by the machine's hostname.
	NodeFound     bool `json:"node_found"`
	NodeReady     bool `json:"node_ready"`
	Unschedulable bool `json:"unschedulable"`
	// CordonedByAnvil: the cordon carries anvil's annotation (an earlier
	// rollout left it), so this rollout may take it over and uncordon it.
	CordonedByAnvil bool `json:"cordoned_by_anvil,omitempty"`
}

// Budget is one PodDisruptionBudget.
type Budget struct {
	Name               string         `json:"name"` // namespace/name
	DisruptionsAllowed int            `json:"disruptions_allowed"`
	PodsPerNode        map[string]int `json:"pods_per_node"` // healthy covered pods by node name
}

// Registry statuses a machine may be rolled from. A machine in
// maintenance, being deleted or unassigned, or not in a pool is refused.
var rollable = []string{"ready", "failed", "reconfiguring", "pending", "provisioning"}

// Evaluate returns one result per check (more than one for a check that
// fails for several machines or budgets).
func Evaluate(s *rollout.State, f Facts) []rollout.CheckResult {
	var out []rollout.CheckResult
	pass := func(name, note string) {
		out = append(out, rollout.CheckResult{Name: name, Passed: true, Reason: note})
	}
	fail := func(name, machine, format string, args ...any) {
		out = append(out, rollout.CheckResult{Name: name, Machine: machine, Reason: fmt.Sprintf(format, args...)})
	}
	count := func(name string) int {
		n := 0
		for _, r := range out {
			if r.Name == name {
				n++
			}
		}
		return n
	}

	// cluster_reachable
	if f.ClusterError != "" {
		fail(rollout.CheckClusterReachable, "", "the API of cluster %s did not answer: %s", s.Cluster, f.ClusterError)
	} else {
		pass(rollout.CheckClusterReachable, "")
	}

	// version_skew
	cp, errCP := values.ParseKubeVersion(f.ControlPlaneVersion)
	kl, errKL := values.ParseKubeVersion(f.KubeletVersion)
	switch {
	case errCP != nil:
		fail(rollout.CheckVersionSkew, "", "the control plane's version is not known (%q)", f.ControlPlaneVersion)
	case errKL != nil:
		fail(rollout.CheckVersionSkew, "", "revision %d's Kubernetes version is not known (%q)", s.Revision, f.KubeletVersion)
	default:
		if err := values.CheckKubeletSkew(cp, kl); err != nil {
			fail(rollout.CheckVersionSkew, "", "%v", err)
		} else {
			pass(rollout.CheckVersionSkew, fmt.Sprintf("kubelet %s, control plane %s", kl, cp))
		}
	}

	// exclusive
	mine := map[string]string{}
	for _, m := range s.Machines {
		mine[m.UUID] = m.Hostname
	}
	for _, h := range f.Holders {
		if h.Rollout == s.ID {
			continue
		}
		var shared []string
		for _, u := range h.Machines {
			if name, ok := mine[u]; ok {
				shared = append(shared, name)
			}
		}
		if len(shared) > 0 {
			sort.Strings(shared)
			fail(rollout.CheckExclusive, "", "rollout %s is still active on %s; let it finish, retry it to success or abort it", h.Rollout, strings.Join(shared, ", "))
		}
	}
	if count(rollout.CheckExclusive) == 0 {
		pass(rollout.CheckExclusive, "")
	}

	// machines_healthy
	facts := map[string]Machine{}
	for _, m := range f.Machines {
		facts[m.UUID] = m
	}
	for _, m := range s.Machines {
		x, ok := facts[m.UUID]
		switch {
		case !ok:
			fail(rollout.CheckMachinesHealthy, m.UUID, "%s: nothing is known about it", m.Hostname)
			continue
		case !slices.Contains(rollable, x.Status):
			fail(rollout.CheckMachinesHealthy, m.UUID, "%s is %s", m.Hostname, x.Status)
		case !x.Online:
			fail(rollout.CheckMachinesHealthy, m.UUID, "%s is offline (no agent heartbeat)", m.Hostname)
		}
		if m.NoNode {
			continue
		}
		switch {
		case !x.NodeFound:
			fail(rollout.CheckMachinesHealthy, m.UUID, "%s has no node in cluster %s", m.Hostname, s.Cluster)
		case !x.NodeReady:
			fail(rollout.CheckMachinesHealthy, m.UUID, "node %s is not Ready", m.Hostname)
		case x.Unschedulable && !x.CordonedByAnvil:
			fail(rollout.CheckMachinesHealthy, m.UUID, "node %s was cordoned by someone else; anvil would not uncordon it, so uncordon it or leave the machine out", m.Hostname)
		}
	}
	if count(rollout.CheckMachinesHealthy) == 0 {
		pass(rollout.CheckMachinesHealthy, "")
	}

	// capacity: a budget that allows no disruption now blocks the first
	// drain of a node with its pods; one that allows fewer than the pods
	// on the maxUnavailable busiest nodes only slows the drains (evicted
	// pods come back elsewhere), which is noted.
	var notes []string
	budget := s.Budget()
	for _, b := range f.Budgets {
		var counts []int
		var hosts []string
		for _, m := range s.Machines {
			if n := b.PodsPerNode[m.Hostname]; n > 0 && !m.NoNode {
				counts = append(counts, n)
				hosts = append(hosts, m.Hostname)
			}
		}
		if len(counts) == 0 {
			continue
		}
		if b.DisruptionsAllowed <= 0 {
			sort.Strings(hosts)
			fail(rollout.CheckCapacity, "", "PodDisruptionBudget %s allows no disruption now; draining %s would block", b.Name, strings.Join(hosts, ", "))
			continue
		}
		slices.Sort(counts)
		slices.Reverse(counts)
		worst := 0
		for _, c := range counts[:min(budget, len(counts))] {
			worst += c
		}
		if worst > b.DisruptionsAllowed {
			notes = append(notes, fmt.Sprintf("PodDisruptionBudget %s allows %d disruptions and %d machines out may hold %d of its pods: drains may wait for it", b.Name, b.DisruptionsAllowed, budget, worst))
		}
	}
	if count(rollout.CheckCapacity) == 0 {
		sort.Strings(notes)
		pass(rollout.CheckCapacity, strings.Join(notes, "; "))
	}
	return out
}
