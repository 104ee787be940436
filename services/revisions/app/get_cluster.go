package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// GetCluster reads one cluster: live from the read model, or as of At
// (a sequence or an instant) rebuilt from its events.
type GetCluster struct {
	Org, Name  string
	At         events.Position
	MinVersion uint64
}

// ClusterView is a cluster and, for live reads, its number of live pools.
type ClusterView struct {
	ClusterRecord
	Pools int
}

// GetClusterHandler serves live reads from the read model and time travel
// from the log.
type GetClusterHandler struct{ *base }

func (h GetClusterHandler) Handle(ctx context.Context, q GetCluster) (ClusterView, error) {
	if err := ids(q.Org, "name", q.Name); err != nil {
		return ClusterView{}, err
	}
	if !q.At.IsZero() {
		rec, err := loadAt[ClusterRecord](ctx, h.base, clusterRef(q.Org, q.Name), q.At)
		if err != nil {
			return ClusterView{}, err
		}
		if rec.Version == 0 {
			return ClusterView{}, errs.NotFound("cluster %q did not exist at that point", q.Name)
		}
		return ClusterView{ClusterRecord: *rec}, nil
	}
	if err := h.waitFor(ctx, q.MinVersion); err != nil {
		return ClusterView{}, err
	}
	rec, err := h.liveCluster(ctx, q.Org, q.Name)
	if err != nil {
		return ClusterView{}, err
	}
	return ClusterView{ClusterRecord: rec, Pools: len(h.Model.Pools(q.Org, q.Name))}, nil
}

// liveCluster returns a live cluster from the read model. A miss may only
// mean that this replica has not applied the cluster's events yet, so the
// model first catches up with the log's head and is asked again.
func (b *base) liveCluster(ctx context.Context, org, name string) (ClusterRecord, error) {
	rec, ok := b.Model.Cluster(org, name)
	if !ok || !rec.State.Exists() {
		if err := b.catchUp(ctx); err != nil {
			return ClusterRecord{}, err
		}
		if rec, ok = b.Model.Cluster(org, name); !ok || !rec.State.Exists() {
			return ClusterRecord{}, notFound("cluster", name)
		}
	}
	return rec, nil
}
