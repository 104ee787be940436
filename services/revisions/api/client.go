package api

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
)

// Each function calls one subject through the command bus. The actor and
// correlation ID travel from ctx (events.WithActor, events.WithCorrelation);
// a call without a deadline times out after command.DefaultTimeout.
// Refusals come back as *errs.Error.

func CreateCluster(ctx context.Context, nc *nats.Conn, req CreateClusterRequest) (Cluster, error) {
	return command.Call[CreateClusterRequest, Cluster](ctx, nc, SubjectClusterCreate, req)
}

func UpdateCluster(ctx context.Context, nc *nats.Conn, req UpdateClusterRequest) (UpdateClusterResponse, error) {
	return command.Call[UpdateClusterRequest, UpdateClusterResponse](ctx, nc, SubjectClusterUpdate, req)
}

func RotateKubeconfig(ctx context.Context, nc *nats.Conn, req RotateKubeconfigRequest) (Cluster, error) {
	return command.Call[RotateKubeconfigRequest, Cluster](ctx, nc, SubjectClusterRotateKubeconfig, req)
}

func RotateBootstrapToken(ctx context.Context, nc *nats.Conn, req RotateBootstrapTokenRequest) (Cluster, error) {
	return command.Call[RotateBootstrapTokenRequest, Cluster](ctx, nc, SubjectClusterRotateBootstrapToken, req)
}

func DeleteCluster(ctx context.Context, nc *nats.Conn, req DeleteClusterRequest) (Deleted, error) {
	return command.Call[DeleteClusterRequest, Deleted](ctx, nc, SubjectClusterDelete, req)
}

func GetCluster(ctx context.Context, nc *nats.Conn, req GetClusterRequest) (Cluster, error) {
	return command.Call[GetClusterRequest, Cluster](ctx, nc, SubjectClusterGet, req)
}

func ListClusters(ctx context.Context, nc *nats.Conn, req ListClustersRequest) (ClusterList, error) {
	return command.Call[ListClustersRequest, ClusterList](ctx, nc, SubjectClusterList, req)
}

// GetClusterCredentials returns the decrypted kubeconfig. Only the rollout
// service's NATS user is allowed to publish on its subject.
func GetClusterCredentials(ctx context.Context, nc *nats.Conn, req ClusterCredentialsRequest) (ClusterCredentials, error) {
	return command.Call[ClusterCredentialsRequest, ClusterCredentials](ctx, nc, SubjectClusterCredentials, req)
}

func CreatePool(ctx context.Context, nc *nats.Conn, req CreatePoolRequest) (PoolChange, error) {
	return command.Call[CreatePoolRequest, PoolChange](ctx, nc, SubjectPoolCreate, req)
}

func UpdatePool(ctx context.Context, nc *nats.Conn, req UpdatePoolRequest) (PoolChange, error) {
	return command.Call[UpdatePoolRequest, PoolChange](ctx, nc, SubjectPoolUpdate, req)
}

func ApplyRevision(ctx context.Context, nc *nats.Conn, req ApplyRevisionRequest) (PoolChange, error) {
	return command.Call[ApplyRevisionRequest, PoolChange](ctx, nc, SubjectPoolApplyRevision, req)
}

func DeletePool(ctx context.Context, nc *nats.Conn, req DeletePoolRequest) (Deleted, error) {
	return command.Call[DeletePoolRequest, Deleted](ctx, nc, SubjectPoolDelete, req)
}

func GetPool(ctx context.Context, nc *nats.Conn, req GetPoolRequest) (Pool, error) {
	return command.Call[GetPoolRequest, Pool](ctx, nc, SubjectPoolGet, req)
}

func ListPools(ctx context.Context, nc *nats.Conn, req ListPoolsRequest) (PoolList, error) {
	return command.Call[ListPoolsRequest, PoolList](ctx, nc, SubjectPoolList, req)
}

func ListRevisions(ctx context.Context, nc *nats.Conn, req ListRevisionsRequest) (RevisionList, error) {
	return command.Call[ListRevisionsRequest, RevisionList](ctx, nc, SubjectRevisionList, req)
}

func GetRevision(ctx context.Context, nc *nats.Conn, req GetRevisionRequest) (Revision, error) {
	return command.Call[GetRevisionRequest, Revision](ctx, nc, SubjectRevisionGet, req)
}

func DiffRevisions(ctx context.Context, nc *nats.Conn, req DiffRevisionsRequest) (RevisionDiff, error) {
	return command.Call[DiffRevisionsRequest, RevisionDiff](ctx, nc, SubjectRevisionDiff, req)
}

func PreviewIgnition(ctx context.Context, nc *nats.Conn, req RevisionIgnitionRequest) (RevisionIgnition, error) {
	return command.Call[RevisionIgnitionRequest, RevisionIgnition](ctx, nc, SubjectRevisionIgnition, req)
}

func ListCatalog(ctx context.Context, nc *nats.Conn, req ListCatalogRequest) (Catalog, error) {
	return command.Call[ListCatalogRequest, Catalog](ctx, nc, SubjectCatalogList, req)
}

// AddCatalogVersion is a platform administrator's command.
func AddCatalogVersion(ctx context.Context, nc *nats.Conn, req AddCatalogVersionRequest) (Catalog, error) {
	return command.Call[AddCatalogVersionRequest, Catalog](ctx, nc, SubjectCatalogAddVersion, req)
}

func CheckSkew(ctx context.Context, nc *nats.Conn, req CheckSkewRequest) (SkewCheck, error) {
	return command.Call[CheckSkewRequest, SkewCheck](ctx, nc, SubjectCatalogCheckSkew, req)
}

// RenderMachine returns a machine revision's Ignition for the boot service.
func RenderMachine(ctx context.Context, nc *nats.Conn, req RenderMachineRequest) (RenderedMachine, error) {
	return command.Call[RenderMachineRequest, RenderedMachine](ctx, nc, SubjectMachineRender, req)
}
