package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// RotateKubeconfig replaces the credentials the rollout service cordons and
// drains with.
type RotateKubeconfig struct {
	Org, Name       string
	Kubeconfig      secret.Secret
	ExpectedVersion uint64
}

// RotateKubeconfig seals the new kubeconfig.
func (a *App) RotateKubeconfig(ctx context.Context, cmd RotateKubeconfig) (ClusterRecord, error) {
	return a.rotateCluster(ctx, cmd.Org, cmd.Name, cmd.ExpectedVersion, func(c *cluster.Cluster, s cluster.Sealer) ([]any, error) {
		return c.RotateKubeconfig(cluster.RotateKubeconfig{Kubeconfig: cmd.Kubeconfig}, s)
	})
}

// rotateCluster replaces one of a cluster's sealed secrets with rotate,
// sealing with the first configured key.
func (a *App) rotateCluster(ctx context.Context, org, name string, expected uint64,
	rotate func(*cluster.Cluster, cluster.Sealer) ([]any, error)) (ClusterRecord, error) {
	if _, err := actor(ctx); err != nil {
		return ClusterRecord{}, err
	}
	if err := ids(org, "name", name); err != nil {
		return ClusterRecord{}, err
	}
	sealer := cluster.Sealer{Key: a.Keys[0], Nonces: a.Nonces}
	rec, _, err := execute[ClusterRecord](ctx, a, clusterRef(org, name), expected,
		func(_ context.Context, r *ClusterRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("cluster", name)
			}
			return rotate(&r.State, sealer)
		})
	if err != nil {
		return ClusterRecord{}, err
	}
	return *rec, nil
}
