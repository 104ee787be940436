// Package readmodel is the revisions service's in-memory projection: the
// clusters and pools of every organization, folded from their events with
// the same records the commands use, and the Kubernetes version catalog.
// The projection runner feeds it; queries read it.
//
// Each organization has its own maps, and every lookup takes the
// organization, so nothing of one organization is reachable from another's
// query.
package readmodel

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// EventTypes are the event types the model applies; the projection's
// filter selects them (the runner skips every other event cheaply, by
// header).
func EventTypes() []string {
	var out []string
	for _, list := range [][]any{cluster.EventTypes(), pool.EventTypes(), catalog.EventTypes()} {
		for _, p := range list {
			out = append(out, p.(events.Payload).EventType())
		}
	}
	return out
}

// Model implements projection.Model and app.ReadModel.
type Model struct {
	projection.Position
	mu      sync.RWMutex
	orgs    map[string]*org
	catalog app.CatalogRecord
}

type org struct {
	clusters map[string]*app.ClusterRecord
	pools    map[string]*app.PoolRecord
}

// New returns an empty model.
func New() *Model { return &Model{orgs: map[string]*org{}} }

var _ app.ReadModel = (*Model)(nil)

// Apply folds one event and moves the checkpoint, in one critical section.
func (m *Model) Apply(env *events.Envelope, payload any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.SetCheckpoint(env.Sequence)
	switch env.AggregateType {
	case app.ClusterType:
		o := m.org(env.Org)
		r := o.clusters[env.AggregateID]
		if r == nil {
			r = &app.ClusterRecord{}
			o.clusters[env.AggregateID] = r
		}
		r.Apply(env, payload)
	case app.PoolType:
		o := m.org(env.Org)
		r := o.pools[env.AggregateID]
		if r == nil {
			r = &app.PoolRecord{}
			o.pools[env.AggregateID] = r
		} else if len(r.State.Revisions) > 0 {
			// Queries hold copies of the record, which share the
			// revisions' backing array; appending must not write into
			// an array a reader may be looking at.
			r.State.Revisions = slices.Clip(r.State.Revisions)
		}
		r.Apply(env, payload)
	case app.CatalogRef.Type:
		if env.Ref() != app.CatalogRef {
			return fmt.Errorf("catalog event on %s, not %s", env.Ref(), app.CatalogRef)
		}
		m.catalog.Apply(env, payload)
	default:
		return fmt.Errorf("event %s on aggregate type %q, which this model does not hold", env.Type, env.AggregateType)
	}
	return nil
}

func (m *Model) org(name string) *org {
	o := m.orgs[name]
	if o == nil {
		o = &org{clusters: map[string]*app.ClusterRecord{}, pools: map[string]*app.PoolRecord{}}
		m.orgs[name] = o
	}
	return o
}

// Reset empties the model.
func (m *Model) Reset() {
	m.mu.Lock()
	m.orgs = map[string]*org{}
	m.catalog = app.CatalogRecord{}
	m.SetCheckpoint(0)
	m.mu.Unlock()
}

// Cluster returns a cluster of org, deleted or not. The record shares
// nothing mutable with the model.
func (m *Model) Cluster(orgName, name string) (app.ClusterRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.orgs[orgName]; o != nil {
		if r := o.clusters[name]; r != nil {
			return *r, true
		}
	}
	return app.ClusterRecord{}, false
}

// Clusters returns org's live clusters, by name.
func (m *Model) Clusters(orgName string) []app.ClusterRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	o := m.orgs[orgName]
	if o == nil {
		return nil
	}
	out := make([]app.ClusterRecord, 0, len(o.clusters))
	for _, r := range o.clusters {
		if r.State.Exists() {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b app.ClusterRecord) int { return cmp.Compare(a.State.Name, b.State.Name) })
	return out
}

// Pool returns a pool of org, deleted or not. Its revisions are shared
// with the model and must be treated as read-only (they are immutable).
func (m *Model) Pool(orgName, name string) (app.PoolRecord, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.orgs[orgName]; o != nil {
		if r := o.pools[name]; r != nil {
			return *r, true
		}
	}
	return app.PoolRecord{}, false
}

// Pools returns org's live pools (of one cluster, unless clusterName is
// empty), by name.
func (m *Model) Pools(orgName, clusterName string) []app.PoolRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	o := m.orgs[orgName]
	if o == nil {
		return nil
	}
	out := make([]app.PoolRecord, 0, len(o.pools))
	for _, r := range o.pools {
		if r.State.Name != "" && !r.State.Deleted && (clusterName == "" || r.State.Cluster == clusterName) {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b app.PoolRecord) int { return cmp.Compare(a.State.Name, b.State.Name) })
	return out
}

// Orgs returns every organization with a cluster or a pool, sorted.
func (m *Model) Orgs() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.orgs))
	for name := range m.orgs {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Catalog returns the Kubernetes version catalog.
func (m *Model) Catalog() app.CatalogRecord {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.catalog
}
