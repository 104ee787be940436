package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
)

// UpdateCluster changes a cluster's endpoint, control plane version or CA
// hash.
type UpdateCluster struct {
	Org, Name       string
	Update          cluster.Update
	ExpectedVersion uint64 // 0: re-decide on a lost race; else If-Match
}

// UpdateClusterResult is the cluster after the update.
type UpdateClusterResult struct {
	Cluster ClusterRecord
	Changed bool
}

// UpdateCluster fills in the kubelet version of each of the
// cluster's pools, so that the domain refuses a control plane version that
// would break the skew policy for any of them.
func (a *App) UpdateCluster(ctx context.Context, cmd UpdateCluster) (UpdateClusterResult, error) {
	if _, err := actor(ctx); err != nil {
		return UpdateClusterResult{}, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		return UpdateClusterResult{}, err
	}
	upd := cmd.Update
	if upd.KubernetesVersion != nil {
		if err := a.catchUp(ctx); err != nil {
			return UpdateClusterResult{}, err
		}
		upd.PoolKubelets = map[string]catalog.Version{}
		for _, p := range a.Model.Pools(cmd.Org, cmd.Name) {
			upd.PoolKubelets[p.State.Name] = p.State.KubernetesVersion()
		}
	}
	rec, payloads, err := execute[ClusterRecord](ctx, a, clusterRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(_ context.Context, r *ClusterRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("cluster", cmd.Name)
			}
			return r.State.Update(upd)
		})
	if err != nil {
		return UpdateClusterResult{}, err
	}
	return UpdateClusterResult{Cluster: *rec, Changed: len(payloads) > 0}, nil
}
