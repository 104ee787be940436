package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// RotateBootstrapToken replaces the token machines join with. It makes no
// revision: the next render of every machine carries the new token (the
// render cache key covers the join material).
type RotateBootstrapToken struct {
	Org, Name       string
	BootstrapToken  secret.Secret
	ExpectedVersion uint64
}

// RotateBootstrapTokenHandler seals the new token.
type RotateBootstrapTokenHandler struct{ *base }

func (h RotateBootstrapTokenHandler) Handle(ctx context.Context, cmd RotateBootstrapToken) (ClusterRecord, error) {
	if _, err := actor(ctx); err != nil {
		return ClusterRecord{}, err
	}
	if err := ids(cmd.Org, "name", cmd.Name); err != nil {
		return ClusterRecord{}, err
	}
	sealer := cluster.Sealer{Key: h.Keys[0], Nonces: h.Nonces}
	rec, _, err := execute[ClusterRecord](ctx, h.base, clusterRef(cmd.Org, cmd.Name), cmd.ExpectedVersion,
		func(_ context.Context, r *ClusterRecord) ([]any, error) {
			if r.State.Name == "" {
				return nil, notFound("cluster", cmd.Name)
			}
			return r.State.RotateBootstrapToken(cluster.RotateBootstrapToken{BootstrapToken: cmd.BootstrapToken}, sealer)
		})
	if err != nil {
		return ClusterRecord{}, err
	}
	return *rec, nil
}
