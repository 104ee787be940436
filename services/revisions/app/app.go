// Package app holds the revisions service's command and query handlers, one
// per file. Commands load an aggregate from the event store, let the domain
// decide, and append with optimistic concurrency; queries read the
// in-memory read model (or, for time travel, replay the log). Nothing here
// knows about NATS: the ports package calls these handlers.
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

// Deps is everything the handlers need.
type Deps struct {
	Store      events.Store
	Registry   *events.Registry
	Model      ReadModel
	Projection Projection
	// Keys open sealed credentials; Keys[0] seals new ones.
	Keys   []secret.Key
	Nonces io.Reader // crypto/rand.Reader in production
	Clock  func() time.Time
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

// Application is every handler of the service.
type Application struct {
	Commands Commands
	Queries  Queries
	Events   EventHandlers
}

// Commands change state.
type Commands struct {
	CreateCluster        CreateClusterHandler
	UpdateCluster        UpdateClusterHandler
	RotateKubeconfig     RotateKubeconfigHandler
	RotateBootstrapToken RotateBootstrapTokenHandler
	DeleteCluster        DeleteClusterHandler
	CreatePool           CreatePoolHandler
	UpdatePool           UpdatePoolHandler
	ApplyRevision        ApplyRevisionHandler
	DeletePool           DeletePoolHandler
	SeedCatalog          SeedCatalogHandler
	AddCatalogVersion    AddCatalogVersionHandler
}

// Queries read state.
type Queries struct {
	GetCluster         GetClusterHandler
	ListClusters       ListClustersHandler
	ClusterCredentials ClusterCredentialsHandler
	GetPool            GetPoolHandler
	ListPools          ListPoolsHandler
	ListRevisions      ListRevisionsHandler
	GetRevision        GetRevisionHandler
	DiffRevisions      DiffRevisionsHandler
	PreviewIgnition    PreviewIgnitionHandler
	ListCatalog        ListCatalogHandler
	CheckSkew          CheckSkewHandler
	RenderMachine      RenderMachineHandler
}

// EventHandlers react to events (run by the handler router).
type EventHandlers struct {
	PlanPlatformRevisions PlanPlatformRevisionsHandler
}

// New wires every handler to d.
func New(d Deps) Application {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	b := &base{d}
	return Application{
		Commands: Commands{
			CreateCluster:        CreateClusterHandler{b},
			UpdateCluster:        UpdateClusterHandler{b},
			RotateKubeconfig:     RotateKubeconfigHandler{b},
			RotateBootstrapToken: RotateBootstrapTokenHandler{b},
			DeleteCluster:        DeleteClusterHandler{b},
			CreatePool:           CreatePoolHandler{b},
			UpdatePool:           UpdatePoolHandler{b},
			ApplyRevision:        ApplyRevisionHandler{b},
			DeletePool:           DeletePoolHandler{b},
			SeedCatalog:          SeedCatalogHandler{b},
			AddCatalogVersion:    AddCatalogVersionHandler{b},
		},
		Queries: Queries{
			GetCluster:         GetClusterHandler{b},
			ListClusters:       ListClustersHandler{b},
			ClusterCredentials: ClusterCredentialsHandler{b},
			GetPool:            GetPoolHandler{b},
			ListPools:          ListPoolsHandler{b},
			ListRevisions:      ListRevisionsHandler{b},
			GetRevision:        GetRevisionHandler{b},
			DiffRevisions:      DiffRevisionsHandler{b},
			PreviewIgnition:    PreviewIgnitionHandler{b},
			ListCatalog:        ListCatalogHandler{b},
			CheckSkew:          CheckSkewHandler{b},
			RenderMachine:      RenderMachineHandler{b},
		},
		Events: EventHandlers{
			PlanPlatformRevisions: PlanPlatformRevisionsHandler{b},
		},
	}
}

// base is the dependencies every handler shares.
type base struct{ Deps }
