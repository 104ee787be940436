package render

import (
	"encoding/json"
	"testing"

	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// checkRender is the property both fuzzers assert: an input that passes
// validation renders, and the output is valid Ignition before and after
// the credential is swapped in.
func checkRender(t *testing.T, cfg pool.Config, settings pool.MachineSettings) {
	if cfg.Validate() != nil || settings.Validate() != nil {
		return
	}
	cfg.Kubernetes.Version = cfg.Kubernetes.Minor + ".3"
	cfg = cfg.Normalize()
	rev := pool.Revision{Number: 1, Hash: cfg.Hash(), Config: cfg}
	m, err := pool.NewMachineRevision("workers", rev, settings)
	if err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	in := Input{Machine: m, Revision: rev, Join: testJoin, Options: testOptions}
	out, err := Render(in)
	if err != nil {
		t.Fatalf("valid input did not render: %v\nconfig: %+v\nsettings: %+v", err, cfg, settings)
	}
	parseIgnition(t, out)
	withCred, err := api.InjectCredential(out, testCredential)
	if err != nil {
		t.Fatal(err)
	}
	parseIgnition(t, withCred)
}

// FuzzRender varies every user-settable string that reaches the config.
func FuzzRender(f *testing.F) {
	f.Add("node-1", "anvil.dev/rack", "r12", "max-pods", "110", "eno1", 100, "10.0.0.5/24", "10.0.0.1", "10.0.0.53", "/dev/disk/by-id/nvme-x", "802.3ad", "ipv4", 1500)
	f.Add("a.b.c", "k", "", "eviction-hard", "memory.available<1%", "bond0", 4094, "2001:db8::5/64", "2001:db8::1", "::1", "/dev/sdb", "active-backup", "both", 0)
	f.Add("x", "a/b", "yes", "feature-gates", "A=true,B=false", "e", 1, "192.168.1.1/32", "", "", "/dev/nvme0n1", "balance-rr", "", 9000)
	f.Add("n", "null", "true", "x", "#:{}[]&*!|>@%", "eth0.5", 5, "1.2.3.4/8", "1.2.3.1", "1.1.1.1", "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1", "802.3ad", "ipv6", 576)
	f.Fuzz(func(t *testing.T, hostname, labelKey, labelValue, argKey, argValue, iface string, vlanID int, addr, gw, dns, device, bondMode, dhcp string, mtu int) {
		cfg := pool.Config{
			Kubernetes: pool.Kubernetes{Minor: "1.33"},
			Flatcar:    pool.Flatcar{Channel: "stable", Version: "4230.2.3"},
			Network: pool.Network{
				Bonds: []pool.Bond{{Name: "bond0", Mode: bondMode, Members: []string{iface, "enx1"}}},
				VLANs: []pool.VLAN{{ID: vlanID, Parent: "bond0", Name: "vl"}},
				Interfaces: []pool.Interface{
					{Name: "vl", DHCP: dhcp, Addresses: nonEmpty(addr), Gateways: nonEmpty(gw), DNS: nonEmpty(dns), MTU: mtu},
				},
			},
			CacheDisk:        &pool.CacheDisk{Device: device, Filesystem: "ext4"},
			NodeLabels:       map[string]string{labelKey: labelValue},
			Taints:           []pool.Taint{{Key: labelKey, Value: labelValue, Effect: pool.EffectNoSchedule}},
			KubeletExtraArgs: map[string]string{argKey: argValue},
			SSHKeys:          []string{testKeyEd25519},
		}
		checkRender(t, cfg, pool.MachineSettings{Hostname: hostname, Labels: map[string]string{labelKey: labelValue}})
	})
}

// FuzzRenderJSON decodes a whole config from JSON, so that list shapes
// (many bonds, bridges of VLANs, ...) are explored too.
func FuzzRenderJSON(f *testing.F) {
	for _, cfg := range shapes() {
		b, _ := json.Marshal(cfg)
		f.Add(b, "node-1")
	}
	f.Add([]byte(`{"kubernetes":{"minor":"1.30"},"flatcar":{"channel":"lts","version":"1.2.3"},"network":{"bridges":[{"name":"br0","members":["eno1.7","bond1"]}],"vlans":[{"id":7,"parent":"eno1"}],"bonds":[{"name":"bond1","mode":"balance-alb","members":["eno2"]}],"interfaces":[{"name":"br0","dhcp":"both"},{"name":"eno1","mtu":9000}]}}`), "h")
	f.Fuzz(func(t *testing.T, data []byte, hostname string) {
		var cfg pool.Config
		if json.Unmarshal(data, &cfg) != nil {
			return
		}
		checkRender(t, cfg, pool.MachineSettings{Hostname: hostname})
	})
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
