package pool

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// PatchCommand is one pool's platform revision to decide.
type PatchCommand struct {
	Pool    string
	Command CreatePlatformRevision
}

// PatchHeld is a pool that would get the patch but cannot yet.
type PatchHeld struct {
	Pool   string
	Reason string
}

// PatchPlan is what adding a patch release to the catalog means for pools.
type PatchPlan struct {
	Commands []PatchCommand
	Held     []PatchHeld
}

// PlanPatch returns, for every live pool on the minor of added whose
// resolved version is older than that minor's newest patch, the command
// that creates a platform-made pending revision. Pools whose control plane
// is older than the new patch are held back (the control plane goes
// first), with the reason. controlPlanes maps cluster name to its version.
// The result is sorted by pool name.
func PlanPatch(cat catalog.Catalog, added catalog.Version, pools []*Pool, controlPlanes map[string]catalog.Version, at time.Time) PatchPlan {
	var plan PatchPlan
	cat = cat.With(added)
	target, err := cat.Latest(added.MinorOf())
	if err != nil {
		return plan
	}
	for _, p := range pools {
		if p == nil || p.Name == "" || p.Deleted {
			continue
		}
		current := p.KubernetesVersion()
		if current.MinorOf() != target.MinorOf() || current.Compare(target) >= 0 {
			continue
		}
		cp, ok := controlPlanes[p.Cluster]
		if !ok || cp.IsZero() {
			plan.Held = append(plan.Held, PatchHeld{Pool: p.Name, Reason: fmt.Sprintf("the control plane version of cluster %q is not known", p.Cluster)})
			continue
		}
		if err := catalog.CheckSkew(cp, target); err != nil {
			plan.Held = append(plan.Held, PatchHeld{Pool: p.Name, Reason: err.Error()})
			continue
		}
		plan.Commands = append(plan.Commands, PatchCommand{Pool: p.Name, Command: CreatePlatformRevision{
			KubernetesVersion: target.String(),
			Message:           fmt.Sprintf("Kubernetes patch release %s (was %s)", target, current),
			At:                at,
		}})
	}
	slices.SortFunc(plan.Commands, func(a, b PatchCommand) int { return strings.Compare(a.Pool, b.Pool) })
	slices.SortFunc(plan.Held, func(a, b PatchHeld) int { return strings.Compare(a.Pool, b.Pool) })
	return plan
}
