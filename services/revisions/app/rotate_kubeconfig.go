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

// RotateKubeconfigHandler seals the new kubeconfig.
type RotateKubeconfigHandler struct{ *base }

func (h RotateKubeconfigHandler) Handle(ctx context.Context, cmd RotateKubeconfig) (ClusterRecord, error) {
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
			return r.State.RotateKubeconfig(cluster.RotateKubeconfig{Kubeconfig: cmd.Kubeconfig}, sealer)
		})
	if err != nil {
		return ClusterRecord{}, err
	}
	return *rec, nil
}
