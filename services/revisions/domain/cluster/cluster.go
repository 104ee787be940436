// Package cluster is the Cluster aggregate: a Kubernetes cluster that
// machines join, with its API endpoint, the sealed credentials the rollout
// service uses to cordon and drain, and the join material rendered into
// every machine's Ignition.
package cluster

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// Cluster is the state folded from a cluster's events. The zero value
// means the cluster does not exist.
type Cluster struct {
	Name              string
	APIEndpoint       string
	KubernetesVersion catalog.Version
	Kubeconfig        secret.Sealed
	BootstrapTokenID  string
	BootstrapToken    secret.Sealed
	CACertHash        string
	Deleted           bool
}

// Exists reports whether the cluster was created and not deleted.
func (c *Cluster) Exists() bool { return c.Name != "" && !c.Deleted }

// Apply folds one event into the state; unknown events are ignored.
func (c *Cluster) Apply(event any) {
	switch e := event.(type) {
	case *Created:
		c.Apply(*e)
	case *Updated:
		c.Apply(*e)
	case *KubeconfigRotated:
		c.Apply(*e)
	case *BootstrapTokenRotated:
		c.Apply(*e)
	case *Deleted:
		c.Apply(*e)
	case Created:
		*c = Cluster{
			Name:             e.Name,
			APIEndpoint:      e.APIEndpoint,
			Kubeconfig:       e.Kubeconfig,
			BootstrapTokenID: e.BootstrapTokenID,
			BootstrapToken:   e.BootstrapToken,
			CACertHash:       e.CACertHash,
		}
		c.KubernetesVersion, _ = catalog.ParseVersion(e.KubernetesVersion)
	case Updated:
		c.APIEndpoint = e.APIEndpoint
		c.KubernetesVersion, _ = catalog.ParseVersion(e.KubernetesVersion)
		c.CACertHash = e.CACertHash
	case KubeconfigRotated:
		c.Kubeconfig = e.Kubeconfig
	case BootstrapTokenRotated:
		c.BootstrapTokenID = e.BootstrapTokenID
		c.BootstrapToken = e.BootstrapToken
	case Deleted:
		c.Deleted = true
	}
}

// Sealer is what sealing needs: the active key and a nonce source
// (crypto/rand.Reader in production).
type Sealer struct {
	Key    secret.Key
	Nonces io.Reader
}

// Create registers a cluster.
type Create struct {
	Name              string        `json:"name"`
	APIEndpoint       string        `json:"api_endpoint"`
	KubernetesVersion string        `json:"kubernetes_version"`
	Kubeconfig        secret.Secret `json:"kubeconfig"`
	BootstrapToken    secret.Secret `json:"bootstrap_token"`
	CACertHash        string        `json:"ca_cert_hash"`
}

// Create decides the creation of a cluster.
func (c *Cluster) Create(cmd Create, s Sealer) ([]any, error) {
	if c.Name != "" {
		if c.Deleted {
			return nil, errs.Conflict("cluster %q was deleted; its name cannot be reused", c.Name)
		}
		return nil, errs.Conflict("cluster %q already exists", c.Name)
	}
	var f errs.Fields
	if err := check.DNSLabel(cmd.Name); err != nil {
		f.Add("name", "%v", err)
	}
	if err := CheckAPIEndpoint(cmd.APIEndpoint); err != nil {
		f.Add("api_endpoint", "%v", err)
	}
	if _, err := catalog.ParseVersion(cmd.KubernetesVersion); err != nil {
		f.Add("kubernetes_version", "%v", err)
	}
	if err := CheckKubeconfig(cmd.Kubeconfig); err != nil {
		f.Add("kubeconfig", "%v", err)
	}
	if err := CheckBootstrapToken(cmd.BootstrapToken); err != nil {
		f.Add("bootstrap_token", "%v", err)
	}
	if err := CheckCACertHash(cmd.CACertHash); err != nil {
		f.Add("ca_cert_hash", "%v", err)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	kc, err := secret.Seal(s.Key, s.Nonces, []byte(cmd.Kubeconfig.Reveal()), KubeconfigAAD(cmd.Name))
	if err != nil {
		return nil, errs.Internal("sealing the kubeconfig: %v", err)
	}
	tok, err := secret.Seal(s.Key, s.Nonces, []byte(cmd.BootstrapToken.Reveal()), BootstrapTokenAAD(cmd.Name))
	if err != nil {
		return nil, errs.Internal("sealing the bootstrap token: %v", err)
	}
	v, _ := catalog.ParseVersion(cmd.KubernetesVersion)
	return []any{Created{
		Name:              cmd.Name,
		APIEndpoint:       cmd.APIEndpoint,
		KubernetesVersion: v.String(),
		Kubeconfig:        kc,
		BootstrapTokenID:  tokenID(cmd.BootstrapToken),
		BootstrapToken:    tok,
		CACertHash:        strings.ToLower(cmd.CACertHash),
	}}, nil
}

// Update changes the plain settings; a nil field keeps its value.
type Update struct {
	APIEndpoint       *string `json:"api_endpoint,omitempty"`
	KubernetesVersion *string `json:"kubernetes_version,omitempty"`
	CACertHash        *string `json:"ca_cert_hash,omitempty"`
	// PoolKubelets maps each of this cluster's pools to its resolved
	// kubelet version; the app layer fills it in so that a control plane
	// version that would break the skew policy for a pool is refused.
	PoolKubelets map[string]catalog.Version `json:"-"`
}

// Update decides a change of endpoint, control plane version or CA hash.
// None of these make a pool revision: machines pick up the new endpoint
// and CA hash on their next boot (they are part of the render input, not
// of a revision).
func (c *Cluster) Update(cmd Update) ([]any, error) {
	if err := c.mustExist(); err != nil {
		return nil, err
	}
	next := Updated{APIEndpoint: c.APIEndpoint, KubernetesVersion: c.KubernetesVersion.String(), CACertHash: c.CACertHash}
	var f errs.Fields
	if cmd.APIEndpoint != nil {
		if err := CheckAPIEndpoint(*cmd.APIEndpoint); err != nil {
			f.Add("api_endpoint", "%v", err)
		}
		next.APIEndpoint = *cmd.APIEndpoint
	}
	if cmd.CACertHash != nil {
		if err := CheckCACertHash(*cmd.CACertHash); err != nil {
			f.Add("ca_cert_hash", "%v", err)
		}
		next.CACertHash = strings.ToLower(*cmd.CACertHash)
	}
	if cmd.KubernetesVersion != nil {
		v, err := catalog.ParseVersion(*cmd.KubernetesVersion)
		if err != nil {
			f.Add("kubernetes_version", "%v", err)
		} else {
			for _, pool := range sortedKeys(cmd.PoolKubelets) {
				if err := catalog.CheckSkew(v, cmd.PoolKubelets[pool]); err != nil {
					f.Add("kubernetes_version", "pool %q: %v", pool, err)
				}
			}
			next.KubernetesVersion = v.String()
		}
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if next == (Updated{APIEndpoint: c.APIEndpoint, KubernetesVersion: c.KubernetesVersion.String(), CACertHash: c.CACertHash}) {
		return nil, nil
	}
	return []any{next}, nil
}

// RotateKubeconfig replaces the cordon/drain credentials.
type RotateKubeconfig struct {
	Kubeconfig secret.Secret `json:"kubeconfig"`
}

func (c *Cluster) RotateKubeconfig(cmd RotateKubeconfig, s Sealer) ([]any, error) {
	if err := c.mustExist(); err != nil {
		return nil, err
	}
	if err := CheckKubeconfig(cmd.Kubeconfig); err != nil {
		return nil, errs.Invalid("kubeconfig", "%v", err)
	}
	kc, err := secret.Seal(s.Key, s.Nonces, []byte(cmd.Kubeconfig.Reveal()), KubeconfigAAD(c.Name))
	if err != nil {
		return nil, errs.Internal("sealing the kubeconfig: %v", err)
	}
	return []any{KubeconfigRotated{Kubeconfig: kc}}, nil
}

// RotateBootstrapToken replaces the join token. Like Update, it makes no
// pool revision; the next render of any machine carries the new token.
type RotateBootstrapToken struct {
	BootstrapToken secret.Secret `json:"bootstrap_token"`
}

func (c *Cluster) RotateBootstrapToken(cmd RotateBootstrapToken, s Sealer) ([]any, error) {
	if err := c.mustExist(); err != nil {
		return nil, err
	}
	if err := CheckBootstrapToken(cmd.BootstrapToken); err != nil {
		return nil, errs.Invalid("bootstrap_token", "%v", err)
	}
	tok, err := secret.Seal(s.Key, s.Nonces, []byte(cmd.BootstrapToken.Reveal()), BootstrapTokenAAD(c.Name))
	if err != nil {
		return nil, errs.Internal("sealing the bootstrap token: %v", err)
	}
	return []any{BootstrapTokenRotated{BootstrapTokenID: tokenID(cmd.BootstrapToken), BootstrapToken: tok}}, nil
}

// Delete removes the cluster.
type Delete struct {
	// Pools is how many pools still belong to the cluster (the app layer
	// counts them); a cluster with pools cannot be deleted.
	Pools int `json:"-"`
}

func (c *Cluster) Delete(cmd Delete) ([]any, error) {
	if err := c.mustExist(); err != nil {
		return nil, err
	}
	if cmd.Pools > 0 {
		return nil, errs.Conflict("cluster %q still has %d machine pool(s); delete them first", c.Name, cmd.Pools)
	}
	return []any{Deleted{}}, nil
}

func (c *Cluster) mustExist() error {
	if c.Name == "" {
		return errs.NotFound("cluster not found")
	}
	if c.Deleted {
		return errs.Conflict("cluster %q was deleted", c.Name)
	}
	return nil
}

// Join is the plaintext join material the renderer needs.
type Join struct {
	APIEndpoint    string
	BootstrapToken secret.Secret
	CACertHash     string
}

// OpenJoin unseals the bootstrap token for rendering.
func (c *Cluster) OpenJoin(keys ...secret.Key) (Join, error) {
	if err := c.mustExist(); err != nil {
		return Join{}, err
	}
	tok, err := secret.Open(c.BootstrapToken, BootstrapTokenAAD(c.Name), keys...)
	if err != nil {
		return Join{}, errs.Internal("cluster %q: %v", c.Name, err)
	}
	return Join{APIEndpoint: c.APIEndpoint, BootstrapToken: secret.Secret(tok), CACertHash: c.CACertHash}, nil
}

// OpenKubeconfig unseals the cordon/drain credentials.
func (c *Cluster) OpenKubeconfig(keys ...secret.Key) (secret.Secret, error) {
	if err := c.mustExist(); err != nil {
		return "", err
	}
	kc, err := secret.Open(c.Kubeconfig, KubeconfigAAD(c.Name), keys...)
	if err != nil {
		return "", errs.Internal("cluster %q: %v", c.Name, err)
	}
	return secret.Secret(kc), nil
}

// KubeconfigAAD and BootstrapTokenAAD bind each ciphertext to its cluster
// and field.
func KubeconfigAAD(cluster string) string     { return "anvil/cluster/" + cluster + "/kubeconfig" }
func BootstrapTokenAAD(cluster string) string { return "anvil/cluster/" + cluster + "/bootstrap_token" }

var (
	tokenRe  = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	caHashRe = regexp.MustCompile(`^sha256:[a-fA-F0-9]{64}$`)
)

// CheckBootstrapToken checks the kubeadm bootstrap token format.
func CheckBootstrapToken(t secret.Secret) error {
	if !tokenRe.MatchString(t.Reveal()) {
		// Never echo the token.
		return fmt.Errorf("must be a kubeadm bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}")
	}
	return nil
}

func tokenID(t secret.Secret) string { id, _, _ := strings.Cut(t.Reveal(), "."); return id }

// CheckCACertHash checks a kubeadm discovery hash.
func CheckCACertHash(h string) error {
	if !caHashRe.MatchString(h) {
		return fmt.Errorf("must have the form sha256:<64 hex digits>")
	}
	return nil
}

// CheckAPIEndpoint checks the Kubernetes API URL: https, a host, an
// optional port, and nothing else (kubeadm joins host:port).
func CheckAPIEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil || s == "" {
		return fmt.Errorf("must be an https URL such as https://api.example.com:6443")
	}
	if u.Scheme != "https" {
		return fmt.Errorf("must use https")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return fmt.Errorf("must be only https://host[:port], without user, path, query or fragment")
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("must name a host")
	}
	if net.ParseIP(host) == nil {
		if err := check.DNSSubdomain(strings.ToLower(host)); err != nil {
			return fmt.Errorf("host %q: %v", host, err)
		}
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port must be 1-65535")
		}
	}
	return nil
}

// JoinEndpoint turns the API URL into the host:port kubeadm expects.
func JoinEndpoint(apiEndpoint string) (string, error) {
	if err := CheckAPIEndpoint(apiEndpoint); err != nil {
		return "", err
	}
	u, _ := url.Parse(apiEndpoint)
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
