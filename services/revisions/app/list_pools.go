package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// ListPools lists an organization's live pools, optionally of one cluster.
type ListPools struct {
	Org, Cluster string
	MinVersion   uint64
}

// ListPools reads the read model.
func (a *App) ListPools(ctx context.Context, q ListPools) ([]PoolRecord, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	if q.Cluster != "" {
		checkName(&f, "cluster", q.Cluster)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := a.waitFor(ctx, q.MinVersion); err != nil {
		return nil, err
	}
	return a.Model.Pools(q.Org, q.Cluster), nil
}
