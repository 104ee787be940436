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

// RotateBootstrapToken seals the new token.
func (a *App) RotateBootstrapToken(ctx context.Context, cmd RotateBootstrapToken) (ClusterRecord, error) {
	return a.rotateCluster(ctx, cmd.Org, cmd.Name, cmd.ExpectedVersion, func(c *cluster.Cluster, s cluster.Sealer) ([]any, error) {
		return c.RotateBootstrapToken(cluster.RotateBootstrapToken{BootstrapToken: cmd.BootstrapToken}, s)
	})
}
