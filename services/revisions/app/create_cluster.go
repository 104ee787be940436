package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
)

// CreateCluster registers a cluster in an organization.
type CreateCluster struct {
	Org     string
	Cluster cluster.Create
}

// CreateCluster seals the credentials and appends cluster.created.
func (a *App) CreateCluster(ctx context.Context, cmd CreateCluster) (ClusterRecord, error) {
	if _, err := actor(ctx); err != nil {
		return ClusterRecord{}, err
	}
	sealer := cluster.Sealer{Key: a.Keys[0], Nonces: a.Nonces}
	var f errs.Fields
	checkOrg(&f, cmd.Org)
	if len(f) > 0 || check.DNSLabel(cmd.Cluster.Name) != nil {
		// Report every field at once: the domain validates the rest
		// (and, with the name invalid, seals nothing).
		var none cluster.Cluster
		_, err := none.Create(cmd.Cluster, sealer)
		validationOnly(&f, err)
		return ClusterRecord{}, f.Err()
	}
	rec, _, err := execute[ClusterRecord](ctx, a, clusterRef(cmd.Org, cmd.Cluster.Name), 0,
		func(_ context.Context, r *ClusterRecord) ([]any, error) {
			return r.State.Create(cmd.Cluster, sealer)
		})
	if err != nil {
		return ClusterRecord{}, err
	}
	return *rec, nil
}
