package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
)

// DeleteCluster deletes a cluster without pools.
type DeleteCluster struct {
	Org, Name       string
	ExpectedVersion uint64
}

// DeleteCluster counts the cluster's live pools in the read model
// (after it caught up with the log) and lets the domain refuse while any
// remain. It returns the cluster's final version.
func (a *App) DeleteCluster(ctx context.Context, cmd DeleteCluster) (uint64, error) {
	if _, err := actor(ctx); err != nil {
		return 0, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		return 0, err
	}
	if err := a.catchUp(ctx); err != nil {
		return 0, err
	}
	pools := len(a.Model.Pools(cmd.Org, cmd.Name))
	rec, _, err := execute[ClusterRecord](ctx, a, clusterRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(_ context.Context, r *ClusterRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("cluster", cmd.Name)
			}
			return r.State.Delete(cluster.Delete{Pools: pools})
		})
	if err != nil {
		return 0, err
	}
	return rec.Version, nil
}
