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

// ListPoolsHandler reads the read model.
type ListPoolsHandler struct{ *base }

func (h ListPoolsHandler) Handle(ctx context.Context, q ListPools) ([]PoolRecord, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	if q.Cluster != "" {
		checkName(&f, "cluster", q.Cluster)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := h.waitFor(ctx, q.MinVersion); err != nil {
		return nil, err
	}
	return h.Model.Pools(q.Org, q.Cluster), nil
}
