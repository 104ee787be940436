package render

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
	"gopkg.in/yaml.v3"
)

const (
	testKeyEd25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7MFQfcHd1ylZUcKQiI8JWtuQRNG3PWlubfBl1oO9T8 ops@example.com"
	testCAHash     = "sha256:0d6dc8d1f1c4e0b6e1d2a3c4b5a6978877665544332211aabbccddeeff001122"
)

var testOptions = Options{
	BaseURL:    "https://boot.anvil.example:8443",
	AgentURL:   "https://boot.anvil.example:8443/assets/anvil-agent-linux-amd64",
	AgentHash:  "sha512-" + strings.Repeat("a1", 64),
	SysextURL:  "https://boot.anvil.example:8443/sysext/kubernetes-v1.33.4-x86-64.raw",
	SysextHash: "sha512-" + strings.Repeat("5e", 64),
}

var testJoin = cluster.Join{
	APIEndpoint:    "https://api.prod.example:6443",
	BootstrapToken: secret.Secret("abcdef.0123456789abcdef"),
	CACertHash:     testCAHash,
}

func baseConfig() pool.Config {
	return pool.Config{
		Kubernetes: pool.Kubernetes{Minor: "1.33", Version: "1.33.4"},
		Flatcar:    pool.Flatcar{Channel: "stable", Version: "4230.2.3"},
		SSHKeys:    []string{testKeyEd25519},
	}
}

// shapes are the pool shapes with golden files.
func shapes() map[string]pool.Config {
	dhcp := baseConfig()
	dhcp.Network.Interfaces = []pool.Interface{{Name: "eno1", DHCP: pool.DHCPBoth}}

	bond := baseConfig()
	bond.Network = pool.Network{
		Bonds:   []pool.Bond{{Name: "bond0", Mode: "802.3ad", Members: []string{"enp65s0f0", "enp65s0f1"}}},
		VLANs:   []pool.VLAN{{ID: 100, Parent: "bond0"}, {ID: 200, Parent: "bond0"}},
		Bridges: []pool.Bridge{{Name: "br200", Members: []string{"bond0.200"}}},
		Interfaces: []pool.Interface{
			{Name: "bond0.100", DHCP: pool.DHCPv4, MTU: 9000},
			{Name: "br200", Addresses: []string{"192.168.200.10/24"}},
		},
	}
	bond.NodeLabels = map[string]string{"anvil.dev/rack": "r12", "node.kubernetes.io/pool": "storage"}
	bond.Taints = []pool.Taint{{Key: "dedicated", Value: "storage", Effect: pool.EffectNoSchedule}}
	bond.KubeletExtraArgs = map[string]string{"max-pods": "250"}

	static := baseConfig()
	static.Network.Interfaces = []pool.Interface{{
		Name:      "eno1",
		Addresses: []string{"10.20.30.40/24", "2001:db8:20::40/64"},
		Gateways:  []string{"10.20.30.1", "2001:db8:20::1"},
		DNS:       []string{"10.20.0.53", "2001:db8::53"},
	}}

	cache := dhcp
	cache.CacheDisk = &pool.CacheDisk{Device: "/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0T123456", Filesystem: "xfs", Wipe: true}

	return map[string]pool.Config{
		"dhcp":             dhcp,
		"bond-vlan-bridge": bond,
		"static":           static,
		"cache-disk":       cache,
	}
}

func testInput(t testing.TB, cfg pool.Config, hostname string, labels map[string]string) Input {
	t.Helper()
	cfg = cfg.Normalize()
	rev := pool.Revision{Number: 3, Hash: cfg.Hash(), Config: cfg, Author: "ops@example.com", CreatedAt: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	m, err := pool.NewMachineRevision("workers", rev, pool.MachineSettings{Hostname: hostname, Labels: labels})
	if err != nil {
		t.Fatalf("machine revision: %v", err)
	}
	return Input{Machine: m, Revision: rev, Join: testJoin, Options: testOptions}
}

func yamlToJSON(s string, v any) error {
	var doc any
	if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func runtimeGosched() { runtime.Gosched() }
