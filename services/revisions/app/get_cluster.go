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

// GetCluster serves live reads from the read model and time travel
// from the log.
func (a *App) GetCluster(ctx context.Context, q GetCluster) (ClusterView, error) {
	if err := ids(q.Org, "name", q.Name); err != nil {
		return ClusterView{}, err
	}
	if !q.At.IsZero() {
		rec, err := loadAt[ClusterRecord](ctx, a, clusterRef(q.Org, q.Name), q.At)
		if err != nil {
			return ClusterView{}, err
		}
		if rec.Version == 0 {
			return ClusterView{}, errs.NotFound("cluster %q did not exist at that point", q.Name)
		}
		return ClusterView{ClusterRecord: *rec}, nil
	}
	if err := a.waitFor(ctx, q.MinVersion); err != nil {
		return ClusterView{}, err
	}
	rec, err := a.liveCluster(ctx, q.Org, q.Name)
	if err != nil {
		return ClusterView{}, err
	}
	return ClusterView{ClusterRecord: rec, Pools: len(a.Model.Pools(q.Org, q.Name))}, nil
}

// liveCluster returns a live cluster from the read model. A miss may only
// mean that this replica has not applied the cluster's events yet, so the
// model first catches up with the log's head and is asked again.
func (a *App) liveCluster(ctx context.Context, org, name string) (ClusterRecord, error) {
	rec, ok := a.Model.Cluster(org, name)
	if !ok || !rec.State.Exists() {
		if err := a.catchUp(ctx); err != nil {
			return ClusterRecord{}, err
		}
		if rec, ok = a.Model.Cluster(org, name); !ok || !rec.State.Exists() {
			return ClusterRecord{}, notFound("cluster", name)
		}
	}
	return rec, nil
}
