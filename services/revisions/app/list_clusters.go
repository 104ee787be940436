package app

import "context"

// ListClusters lists an organization's live clusters.
type ListClusters struct {
	Org        string
	MinVersion uint64
}

// ListClustersHandler reads the read model.
type ListClustersHandler struct{ *base }

func (h ListClustersHandler) Handle(ctx context.Context, q ListClusters) ([]ClusterView, error) {
	if err := ids(q.Org); err != nil {
		return nil, err
	}
	if err := h.waitFor(ctx, q.MinVersion); err != nil {
		return nil, err
	}
	recs := h.Model.Clusters(q.Org)
	out := make([]ClusterView, len(recs))
	for i, r := range recs {
		out[i] = ClusterView{ClusterRecord: r, Pools: len(h.Model.Pools(q.Org, r.State.Name))}
	}
	return out, nil
}
