package ports

import (
	"encoding/json"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/diff"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// ---- api → domain ----

// toSpec converts a spec; what does not convert (durations) is recorded in
// f under its JSON path, and the rest still converts, so that the domain
// can report every other problem in the same answer.
func toSpec(f *errs.Fields, s api.PoolSpec) pool.Spec {
	return pool.Spec{DisplayName: s.DisplayName, Config: toConfig(s.Config()), Rollout: toRollout(f, s.Rollout),
		AutoApplyPlatformRevisions: s.AutoApplyPlatformRevisions}
}

func toConfig(c api.PoolConfig) pool.Config {
	out := pool.Config{
		Kubernetes:       pool.Kubernetes{Minor: c.Kubernetes.Minor, Version: c.Kubernetes.Version},
		Flatcar:          pool.Flatcar{Channel: c.Flatcar.Channel, Version: c.Flatcar.Version},
		NodeLabels:       c.NodeLabels,
		KubeletExtraArgs: c.KubeletExtraArgs,
		SSHKeys:          c.SSHKeys,
	}
	for _, b := range c.Network.Bonds {
		out.Network.Bonds = append(out.Network.Bonds, pool.Bond{Name: b.Name, Mode: b.Mode, Members: b.Members})
	}
	for _, v := range c.Network.VLANs {
		out.Network.VLANs = append(out.Network.VLANs, pool.VLAN{ID: v.ID, Parent: v.Parent, Name: v.Name})
	}
	for _, b := range c.Network.Bridges {
		out.Network.Bridges = append(out.Network.Bridges, pool.Bridge{Name: b.Name, Members: b.Members})
	}
	for _, i := range c.Network.Interfaces {
		out.Network.Interfaces = append(out.Network.Interfaces, pool.Interface{
			Name: i.Name, DHCP: i.DHCP, Addresses: i.Addresses, Gateways: i.Gateways, DNS: i.DNS, MTU: i.MTU,
		})
	}
	if d := c.CacheDisk; d != nil {
		out.CacheDisk = &pool.CacheDisk{Device: d.Device, Filesystem: d.Filesystem, Wipe: d.Wipe}
	}
	for _, t := range c.Taints {
		out.Taints = append(out.Taints, pool.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return out
}

func toRollout(f *errs.Fields, r api.Rollout) pool.Rollout {
	dur := func(field, s string) pool.Duration {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			f.Add("rollout."+field, "%q is not a duration such as \"90s\" or \"15m\"", s)
			return 0
		}
		return pool.Duration(d)
	}
	out := pool.Rollout{
		MaxUnavailable:   pool.IntOrPercent(r.MaxUnavailable),
		Pause:            dur("pause", r.Pause),
		DrainTimeout:     dur("drain_timeout", r.DrainTimeout),
		NodeReadyTimeout: dur("node_ready_timeout", r.NodeReadyTimeout),
	}
	if r.DrainGracePeriod != nil {
		g := dur("drain_grace_period", *r.DrainGracePeriod)
		out.DrainGracePeriod = &g
	}
	for _, w := range r.MaintenanceWindows {
		out.MaintenanceWindows = append(out.MaintenanceWindows, pool.Window{Days: w.Days, Start: w.Start, End: w.End, TimeZone: w.TimeZone})
	}
	if r.Remediation != nil {
		out.Remediation = &pool.Remediation{MaxInFlight: r.Remediation.MaxInFlight}
	}
	return out
}

// ---- domain → api ----

func fromCluster(v app.ClusterView) api.Cluster {
	c := v.State
	return api.Cluster{
		Org:               v.Org,
		Name:              c.Name,
		APIEndpoint:       c.APIEndpoint,
		KubernetesVersion: versionString(c.KubernetesVersion),
		BootstrapTokenID:  c.BootstrapTokenID,
		CACertHash:        c.CACertHash,
		Pools:             v.Pools,
		Deleted:           c.Deleted,
		CreatedAt:         v.CreatedAt,
		UpdatedAt:         v.UpdatedAt,
		Version:           v.Version,
	}
}

func versionString(v catalog.Version) string {
	if v.IsZero() {
		return ""
	}
	return v.String()
}

func fromConfig(c pool.Config) api.PoolConfig {
	out := api.PoolConfig{
		Kubernetes:       api.Kubernetes{Minor: c.Kubernetes.Minor, Version: c.Kubernetes.Version},
		Flatcar:          api.Flatcar{Channel: c.Flatcar.Channel, Version: c.Flatcar.Version},
		NodeLabels:       c.NodeLabels,
		KubeletExtraArgs: c.KubeletExtraArgs,
		SSHKeys:          c.SSHKeys,
	}
	for _, b := range c.Network.Bonds {
		out.Network.Bonds = append(out.Network.Bonds, api.Bond{Name: b.Name, Mode: b.Mode, Members: b.Members})
	}
	for _, v := range c.Network.VLANs {
		out.Network.VLANs = append(out.Network.VLANs, api.VLAN{ID: v.ID, Parent: v.Parent, Name: v.Name})
	}
	for _, b := range c.Network.Bridges {
		out.Network.Bridges = append(out.Network.Bridges, api.Bridge{Name: b.Name, Members: b.Members})
	}
	for _, i := range c.Network.Interfaces {
		out.Network.Interfaces = append(out.Network.Interfaces, api.Interface{
			Name: i.Name, DHCP: i.DHCP, Addresses: i.Addresses, Gateways: i.Gateways, DNS: i.DNS, MTU: i.MTU,
		})
	}
	if d := c.CacheDisk; d != nil {
		out.CacheDisk = &api.CacheDisk{Device: d.Device, Filesystem: d.Filesystem, Wipe: d.Wipe}
	}
	for _, t := range c.Taints {
		out.Taints = append(out.Taints, api.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	return out
}

func fromRollout(r pool.Rollout) api.Rollout {
	dur := func(d pool.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	out := api.Rollout{
		MaxUnavailable:   api.IntOrPercent(r.MaxUnavailable),
		Pause:            dur(r.Pause),
		DrainTimeout:     dur(r.DrainTimeout),
		NodeReadyTimeout: dur(r.NodeReadyTimeout),
	}
	if r.DrainGracePeriod != nil {
		s := r.DrainGracePeriod.String()
		out.DrainGracePeriod = &s
	}
	if r.Remediation != nil {
		out.Remediation = &api.Remediation{MaxInFlight: r.Remediation.MaxInFlight}
	}
	for _, w := range r.MaintenanceWindows {
		out.MaintenanceWindows = append(out.MaintenanceWindows, api.MaintenanceWindow{Days: w.Days, Start: w.Start, End: w.End, TimeZone: w.TimeZone})
	}
	return out
}

func fromRevisionSummary(r pool.Revision, applied int) api.RevisionSummary {
	return api.RevisionSummary{
		Number: r.Number, Hash: r.Hash, Author: r.Author, Message: r.Message,
		CreatedAt: r.CreatedAt, PlatformMade: r.PlatformMade, Applied: r.Number == applied,
	}
}

func fromRevisions(p *pool.Pool) []api.RevisionSummary {
	out := make([]api.RevisionSummary, len(p.Revisions))
	for i, r := range p.Revisions {
		out[i] = fromRevisionSummary(r, p.AppliedRevision)
	}
	return out
}

func fromPool(rec app.PoolRecord) api.Pool {
	p := &rec.State
	spec := p.Spec()
	latest, _ := p.Latest()
	apiSpec := api.SpecOf(spec.DisplayName, fromConfig(spec.Config), fromRollout(spec.Rollout))
	apiSpec.AutoApplyPlatformRevisions = spec.AutoApplyPlatformRevisions
	return api.Pool{
		Org:               rec.Org,
		Name:              p.Name,
		Cluster:           p.Cluster,
		Spec:              apiSpec,
		KubernetesVersion: latest.Config.Kubernetes.Version,
		LatestRevision:    latest.Number,
		AppliedRevision:   p.AppliedRevision,
		Applied:           appliedOf(p),
		Revisions:         fromRevisions(p),
		Deleted:           p.Deleted,
		CreatedAt:         rec.CreatedAt,
		UpdatedAt:         rec.UpdatedAt,
		Version:           rec.Version,
	}
}

// appliedOf summarises the pool's applied revision (nil before any apply).
func appliedOf(p *pool.Pool) *api.AppliedRevision {
	if p.AppliedRevision == 0 {
		return nil
	}
	r, err := p.Revision(p.AppliedRevision)
	if err != nil {
		return nil
	}
	return &api.AppliedRevision{Number: r.Number, KubernetesVersion: r.Config.Kubernetes.Version,
		Flatcar: api.Flatcar{Channel: r.Config.Flatcar.Channel, Version: r.Config.Flatcar.Version}}
}

func fromPoolSummary(rec app.PoolRecord) api.PoolSummary {
	p := &rec.State
	latest, _ := p.Latest()
	out := api.PoolSummary{
		Org: rec.Org, Name: p.Name, Cluster: p.Cluster, DisplayName: p.DisplayName,
		KubernetesVersion: latest.Config.Kubernetes.Version,
		LatestRevision:    latest.Number, AppliedRevision: p.AppliedRevision,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, Version: rec.Version,
	}
	if a := appliedOf(p); a != nil {
		out.AppliedKubernetesVersion = a.KubernetesVersion
	}
	return out
}

func fromOutcome(o app.PoolOutcome) api.PoolChange {
	return api.PoolChange{
		Pool:            fromPool(o.Pool),
		Changed:         o.Changed,
		RevisionCreated: o.RevisionCreated,
		SettingsChanged: o.SettingsChanged,
		ApplyRequested:  o.ApplyRequested,
		Rollback:        o.Rollback,
		Rollout:         o.Rollout,
	}
}

func fromCatalog(rec app.CatalogRecord) api.Catalog {
	out := api.Catalog{Versions: []string{}, Minors: []api.CatalogMinor{}, Version: rec.Version}
	for _, v := range rec.State.Catalog.Versions() {
		out.Versions = append(out.Versions, v.String())
		n := len(out.Minors)
		if n == 0 || out.Minors[n-1].Minor != v.MinorOf().String() {
			out.Minors = append(out.Minors, api.CatalogMinor{Minor: v.MinorOf().String()})
			n++
		}
		out.Minors[n-1].Versions = append(out.Minors[n-1].Versions, v.String())
		out.Minors[n-1].Latest = v.String()
	}
	return out
}

func fromDiff(d diff.Diff) api.RevisionDiff {
	out := api.RevisionDiff{
		From: d.From, To: d.To, FromHash: d.FromHash, ToHash: d.ToHash,
		Changes: make([]api.Change, len(d.Changes)), Ignition: d.Ignition,
	}
	for i, c := range d.Changes {
		out.Changes[i] = api.Change{Path: c.Path, Old: c.Old, New: c.New}
	}
	for _, fd := range d.Files {
		out.Files = append(out.Files, api.FileDiff{Path: fd.Path, Unified: fd.Unified})
	}
	return out
}

// rawJSON hands rendered Ignition to the reply without copying it again.
func rawJSON(b []byte) json.RawMessage { return json.RawMessage(b) }
