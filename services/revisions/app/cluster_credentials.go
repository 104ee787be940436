package app

import (
	"context"

	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// ClusterCredentials asks for a cluster's decrypted kubeconfig.
type ClusterCredentials struct {
	Org, Cluster string
}

// Credentials is what the rollout service cordons and drains with.
type Credentials struct {
	Org, Cluster string
	APIEndpoint  string
	Kubeconfig   secret.Secret
	Version      uint64
}

// ClusterCredentials opens the sealed kubeconfig of the cluster as
// the log has it now (not the read model), so that a rotation takes effect
// at once. Only the rollout service may call it (NATS permissions on the
// subject); the plaintext is never logged.
func (a *App) ClusterCredentials(ctx context.Context, q ClusterCredentials) (Credentials, error) {
	if err := ids(q.Org, "cluster", q.Cluster); err != nil {
		return Credentials{}, err
	}
	rec, err := a.loadCluster(ctx, q.Org, q.Cluster)
	if err != nil {
		return Credentials{}, err
	}
	if !rec.State.Exists() {
		return Credentials{}, notFound("cluster", q.Cluster)
	}
	kc, err := rec.State.OpenKubeconfig(a.Keys...)
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{Org: q.Org, Cluster: q.Cluster, APIEndpoint: rec.State.APIEndpoint, Kubeconfig: kc, Version: rec.Version}, nil
}
