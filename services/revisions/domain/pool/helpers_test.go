package pool

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

const (
	keyA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7MFQfcHd1ylZUcKQiI8JWtuQRNG3PWlubfBl1oO9T8 ops@example.com"
	keyB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGt5xX5qCVI5KCwEgY6WES8/A6QAG6l6VkwjhSo/HqX8 dev@example.com"
)

var (
	t0      = time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC)
	testCat = catalog.MustNew("1.30.14", "1.31.9", "1.32.7", "1.33.1", "1.33.4", "1.34.1")
)

func testCluster(t testing.TB, version string) *cluster.Cluster {
	t.Helper()
	k, _ := secret.NewKey("k1", bytes.Repeat([]byte{1}, 32))
	var c cluster.Cluster
	evs, err := c.Create(cluster.Create{
		Name: "prod", APIEndpoint: "https://api.prod.example:6443", KubernetesVersion: version,
		Kubeconfig: "clusters: [{name: a, cluster: {server: 'https://api.prod.example:6443'}}]\nusers: [{name: b, user: {token: t0k3n}}]\n" +
			"contexts: [{name: c, context: {cluster: a, user: b}}]\ncurrent-context: c\n", BootstrapToken: "abcdef.0123456789abcdef",
		CACertHash: "sha256:" + fmt.Sprintf("%064x", 1),
	}, cluster.Sealer{Key: k, Nonces: rand.Reader})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		c.Apply(e)
	}
	return &c
}

func testEnv(t testing.TB) Env {
	return Env{Catalog: testCat, Cluster: testCluster(t, "1.34.1")}
}

func validSpec() Spec {
	return Spec{
		DisplayName: "Workers",
		Config: Config{
			Kubernetes: Kubernetes{Minor: "1.33"},
			Flatcar:    Flatcar{Channel: ChannelStable, Version: "4230.2.3"},
			Network: Network{
				Bonds:      []Bond{{Name: "bond0", Mode: "802.3ad", Members: []string{"eno1", "eno2"}}},
				VLANs:      []VLAN{{ID: 100, Parent: "bond0"}, {ID: 200, Parent: "bond0"}},
				Bridges:    []Bridge{{Name: "br200", Members: []string{"bond0.200"}}},
				Interfaces: []Interface{{Name: "bond0.100", DHCP: DHCPv4}, {Name: "br200", Addresses: []string{"10.2.0.5/24"}, Gateways: []string{"10.2.0.1"}, DNS: []string{"10.2.0.53"}}},
			},
			CacheDisk:        &CacheDisk{Device: "/dev/disk/by-id/nvme-eui.0025388b91b2c1a5", Filesystem: "xfs"},
			NodeLabels:       map[string]string{"anvil.dev/rack": "r12"},
			Taints:           []Taint{{Key: "dedicated", Value: "db", Effect: EffectNoSchedule}},
			KubeletExtraArgs: map[string]string{"max-pods": "200"},
			SSHKeys:          []string{keyA},
		},
		Rollout: Rollout{MaxUnavailable: "25%", Pause: Duration(time.Minute)},
	}
}

// created returns a pool after Create of validSpec.
func created(t testing.TB) (*Pool, Env) {
	t.Helper()
	env := testEnv(t)
	var p Pool
	evs, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: validSpec(), Author: "alice", At: t0}, env)
	if err != nil {
		t.Fatal(err)
	}
	apply(&p, evs)
	return &p, env
}

func apply(p *Pool, evs []any) {
	for _, e := range evs {
		p.Apply(e)
	}
}

func fieldsOf(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, f := range errs.As(err).Fields {
		out = append(out, f.Field)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func eventTypes(evs []any) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.(interface{ EventType() string }).EventType())
	}
	return out
}
