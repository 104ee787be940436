// Package app is the revisions service's application layer: one App with
// one method per command or query, one per file. Commands load an
// aggregate from the event store, let the domain decide, and append with
// optimistic concurrency; queries read the in-memory read model (or, for
// time travel, replay the log). Nothing here knows about NATS: the ports
// package calls these methods.
package app

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// PlatformOrg is the pseudo-organization that owns platform-wide
// aggregates. It is not a DNS label, so no real organization can have it.
const PlatformOrg = "_platform"

// CatalogRef is the Kubernetes version catalog's aggregate.
var CatalogRef = events.AggregateRef{Org: PlatformOrg, Type: "catalog", ID: "kubernetes"}

// Aggregate types on the log: events.<org>.cluster.<name>, events.<org>.pool.<name>.
const (
	ClusterType = "cluster"
	PoolType    = "pool"
)

// ReadModel is what queries read: the projection of clusters, pools and
// the catalog. Every lookup is scoped by organization.
type ReadModel interface {
	// Cluster returns a cluster, deleted or not.
	Cluster(org, name string) (ClusterRecord, bool)
	// Clusters returns the organization's live clusters, by name.
	Clusters(org string) []ClusterRecord
	// Pool returns a pool, deleted or not.
	Pool(org, name string) (PoolRecord, bool)
	// Pools returns the organization's live pools, by name; cluster ""
	// means all of them.
	Pools(org, cluster string) []PoolRecord
	// Orgs returns every organization that has a cluster or a pool.
	Orgs() []string
	// Catalog returns the Kubernetes version catalog.
	Catalog() CatalogRecord
}

// Projection is the read model's runner: WaitFor blocks until the model
// has applied the log up to seq (projection.Runner implements it).
type Projection interface {
	WaitFor(ctx context.Context, seq uint64) error
}

// Renderer renders Ignition; *render.Cache renders each input once.
type Renderer interface {
	Render(render.Input) ([]byte, error)
}

// PoolMachines answers how many machines still belong to a pool. The
// registry owns machines (adapters/registry asks it); an error is
// errs.KindUnavailable when the registry does not answer, so that a pool
// is never deleted unchecked.
type PoolMachines interface {
	CountMachines(ctx context.Context, org, pool string) (int, error)
}

// App is the revisions service's application layer: one method per
// command or query, one per file.
type App struct {
	Store      events.Store
	Registry   *events.Registry
	Model      ReadModel
	Projection Projection
	// Keys open sealed credentials; Keys[0] seals new ones.
	Keys   []secret.Key
	Nonces io.Reader // crypto/rand.Reader in production
	Now    func() time.Time
	// Retry bounds and spaces the re-decisions of a command that lost an
	// optimistic-concurrency race; zero: aggregate's defaults.
	Retry aggregate.Retry
	// Renderer and RenderOptions render machine revisions and previews;
	// the files machines fetch are resolved through Assets (with
	// AssetSettings) first, which fills in their URLs and hashes.
	Renderer      Renderer
	RenderOptions render.Options
	Assets        Assets
	AssetSettings AssetSettings
	// Machines is required by DeletePool: without it a pool is not
	// deleted (it might still have machines).
	Machines PoolMachines
	Log      *slog.Logger
}

// Defaults fills in the zero fields.
func (a *App) Defaults() {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Log == nil {
		a.Log = slog.Default()
	}
}
