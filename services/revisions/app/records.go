package app

import (
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// A record is an aggregate's folded state plus what the log says about it:
// its version (the stream sequence of its last event) and when it was
// created and last changed. Commands, the read model and time travel all
// fold events through the same records.

// ClusterRecord is a cluster and its log metadata.
type ClusterRecord struct {
	Org       string
	State     cluster.Cluster
	Version   uint64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Apply folds one decoded event.
func (r *ClusterRecord) Apply(env *events.Envelope, payload any) {
	if r.Version == 0 {
		r.Org, r.CreatedAt = env.Org, env.Time
	}
	r.State.Apply(payload)
	r.Version, r.UpdatedAt = env.Sequence, env.Time
}

// CurrentVersion is the aggregate's version.
func (r *ClusterRecord) CurrentVersion() uint64 { return r.Version }

// PoolRecord is a pool and its log metadata.
type PoolRecord struct {
	Org       string
	State     pool.Pool
	Version   uint64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Apply folds one decoded event.
func (r *PoolRecord) Apply(env *events.Envelope, payload any) {
	if r.Version == 0 {
		r.Org, r.CreatedAt = env.Org, env.Time
	}
	r.State.Apply(payload)
	r.Version, r.UpdatedAt = env.Sequence, env.Time
}

// CurrentVersion is the aggregate's version.
func (r *PoolRecord) CurrentVersion() uint64 { return r.Version }

// CatalogRecord is the Kubernetes version catalog and its version.
type CatalogRecord struct {
	State     catalog.State
	Version   uint64
	UpdatedAt time.Time
}

// Apply folds one decoded event.
func (r *CatalogRecord) Apply(env *events.Envelope, payload any) {
	r.State.Apply(payload)
	r.Version, r.UpdatedAt = env.Sequence, env.Time
}

// CurrentVersion is the aggregate's version.
func (r *CatalogRecord) CurrentVersion() uint64 { return r.Version }
