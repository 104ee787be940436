package cluster

import "github.com/anvil-fleet/anvil/services/revisions/domain/secret"

// Created records a new cluster. Both credentials are sealed: the event log
// is readable by every projection, a join token or kubeconfig is not.
type Created struct {
	Name              string        `json:"name"`
	APIEndpoint       string        `json:"api_endpoint"`
	KubernetesVersion string        `json:"kubernetes_version"`
	Kubeconfig        secret.Sealed `json:"kubeconfig"`
	BootstrapTokenID  string        `json:"bootstrap_token_id"` // the public half, for audit
	BootstrapToken    secret.Sealed `json:"bootstrap_token"`
	CACertHash        string        `json:"ca_cert_hash"`
}

// Updated carries the new values of the cluster's plain settings.
type Updated struct {
	APIEndpoint       string `json:"api_endpoint"`
	KubernetesVersion string `json:"kubernetes_version"`
	CACertHash        string `json:"ca_cert_hash"`
}

// KubeconfigRotated replaces the credentials used to cordon and drain.
type KubeconfigRotated struct {
	Kubeconfig secret.Sealed `json:"kubeconfig"`
}

// BootstrapTokenRotated replaces the token machines join with.
type BootstrapTokenRotated struct {
	BootstrapTokenID string        `json:"bootstrap_token_id"`
	BootstrapToken   secret.Sealed `json:"bootstrap_token"`
}

// Deleted records that the cluster is gone; its name is not reused.
type Deleted struct{}

func (Created) EventType() string               { return "cluster.created" }
func (Updated) EventType() string               { return "cluster.updated" }
func (KubeconfigRotated) EventType() string     { return "cluster.kubeconfig_rotated" }
func (BootstrapTokenRotated) EventType() string { return "cluster.bootstrap_token_rotated" }
func (Deleted) EventType() string               { return "cluster.deleted" }

// EventTypes returns a zero value of every payload, for registration.
func EventTypes() []any {
	return []any{Created{}, Updated{}, KubeconfigRotated{}, BootstrapTokenRotated{}, Deleted{}}
}
