package app

import "context"

// ListClusters lists an organization's live clusters.
type ListClusters struct {
	Org        string
	MinVersion uint64
}

// ListClusters reads the read model.
func (a *App) ListClusters(ctx context.Context, q ListClusters) ([]ClusterView, error) {
	if err := ids(q.Org); err != nil {
		return nil, err
	}
	if err := a.waitFor(ctx, q.MinVersion); err != nil {
		return nil, err
	}
	recs := a.Model.Clusters(q.Org)
	out := make([]ClusterView, len(recs))
	for i, r := range recs {
		out[i] = ClusterView{ClusterRecord: r, Pools: len(a.Model.Pools(q.Org, r.State.Name))}
	}
	return out, nil
}
