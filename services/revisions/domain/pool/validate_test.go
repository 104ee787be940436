package pool

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

func TestSpecValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Spec)
		fields []string // every field that must be named, sorted
	}{
		{"valid", func(*Spec) {}, nil},
		{"minimal", func(s *Spec) {
			*s = Spec{DisplayName: "x", Config: Config{Kubernetes: Kubernetes{Minor: "1.33"}, Flatcar: Flatcar{Channel: "lts", Version: "4081.3.6"}}}
		}, nil},
		{"display name empty", func(s *Spec) { s.DisplayName = "" }, []string{"display_name"}},
		{"kubernetes minor empty", func(s *Spec) { s.Kubernetes.Minor = "" }, []string{"kubernetes.minor"}},
		{"kubernetes full version as minor", func(s *Spec) { s.Kubernetes.Minor = "1.33.4" }, []string{"kubernetes.minor"}},
		{"flatcar channel empty", func(s *Spec) { s.Flatcar.Channel = "" }, []string{"flatcar.channel"}},
		{"flatcar channel unknown", func(s *Spec) { s.Flatcar.Channel = "edge" }, []string{"flatcar.channel"}},
		{"flatcar version bad", func(s *Spec) { s.Flatcar.Version = "latest" }, []string{"flatcar.version"}},

		{"vlan id 0", func(s *Spec) { s.Network.VLANs[0].ID = 0 }, []string{"network.vlans[0].id"}},
		{"vlan id 4095", func(s *Spec) { s.Network.VLANs[1].ID = 4095 }, []string{"network.vlans[1].id"}},
		{"vlan id 4094 ok", func(s *Spec) { s.Network.VLANs[0].ID = 4094; s.Network.Interfaces[0].Name = "bond0.4094" }, nil},
		{"vlan duplicate", func(s *Spec) {
			s.Network.VLANs = append(s.Network.VLANs, VLAN{ID: 100, Parent: "bond0", Name: "v100b"})
		}, []string{"network.vlans[2]"}},
		{"vlan default name too long", func(s *Spec) {
			s.Network.VLANs = append(s.Network.VLANs, VLAN{ID: 1000, Parent: "enp129s0f0np0"})
		}, []string{"network.vlans[2].name"}},
		{"vlan explicit name", func(s *Spec) {
			s.Network.VLANs = append(s.Network.VLANs, VLAN{ID: 1000, Parent: "enp129s0f0np0", Name: "storage"})
		}, nil},
		{"vlan on bond member", func(s *Spec) {
			s.Network.VLANs = append(s.Network.VLANs, VLAN{ID: 300, Parent: "eno1"})
		}, []string{"network.vlans[2].parent"}},
		{"vlan on vlan", func(s *Spec) {
			s.Network.VLANs = append(s.Network.VLANs, VLAN{ID: 300, Parent: "bond0.100", Name: "qinq"})
		}, []string{"network.vlans[2].parent"}},
		{"bond without members", func(s *Spec) { s.Network.Bonds[0].Members = nil }, []string{"network.bonds[0].members"}},
		{"bond bad mode", func(s *Spec) { s.Network.Bonds[0].Mode = "lacp" }, []string{"network.bonds[0].mode"}},
		{"nic in two bonds", func(s *Spec) {
			s.Network.Bonds = append(s.Network.Bonds, Bond{Name: "bond1", Mode: "active-backup", Members: []string{"eno2", "eno3"}})
		}, []string{"network.bonds[1].members[0]"}},
		{"nic twice in one bond", func(s *Spec) { s.Network.Bonds[0].Members = []string{"eno1", "eno1"} }, []string{"network.bonds[0].members[1]"}},
		{"bond member addressed", func(s *Spec) {
			s.Network.Interfaces = append(s.Network.Interfaces, Interface{Name: "eno1", DHCP: DHCPv4})
		}, []string{"network.interfaces[2].name"}},
		{"bond member also bridged", func(s *Spec) { s.Network.Bridges[0].Members = append(s.Network.Bridges[0].Members, "eno2") }, []string{"network.bridges[0].members[1]"}},
		{"bridge port addressed", func(s *Spec) {
			s.Network.Interfaces = append(s.Network.Interfaces, Interface{Name: "bond0.200", DHCP: DHCPv4})
		}, []string{"network.interfaces[2].name"}},
		{"bond of a vlan", func(s *Spec) {
			s.Network.Bonds = append(s.Network.Bonds, Bond{Name: "bond1", Mode: "active-backup", Members: []string{"bond0.100"}})
		}, []string{"network.bonds[1].members[0]"}},
		{"bridge in bridge", func(s *Spec) {
			s.Network.Bridges = append(s.Network.Bridges, Bridge{Name: "br1", Members: []string{"br200"}})
		}, []string{"network.bridges[1].members[0]"}},
		{"device name clash", func(s *Spec) { s.Network.Bridges[0].Name = "bond0" }, []string{"network.bridges[0].name"}},
		{"interface name too long", func(s *Spec) { s.Network.Interfaces[0].Name = "a-very-long-ifname" }, []string{"network.interfaces[0].name"}},
		{"interface name with slash", func(s *Spec) { s.Network.Interfaces[0].Name = "eth/0" }, []string{"network.interfaces[0].name"}},
		{"interface configured twice", func(s *Spec) {
			s.Network.Interfaces = append(s.Network.Interfaces, Interface{Name: "br200", DHCP: DHCPv6})
		}, []string{"network.interfaces[2].name"}},
		{"bad dhcp", func(s *Spec) { s.Network.Interfaces[0].DHCP = "yes" }, []string{"network.interfaces[0].dhcp"}},
		{"malformed CIDR", func(s *Spec) { s.Network.Interfaces[1].Addresses = []string{"10.2.0.5"} }, []string{"network.interfaces[1].addresses[0]", "network.interfaces[1].gateways[0]"}},
		{"CIDR bad prefix", func(s *Spec) { s.Network.Interfaces[1].Addresses = []string{"10.2.0.5/33"} }, []string{"network.interfaces[1].addresses[0]", "network.interfaces[1].gateways[0]"}},
		{"loopback address", func(s *Spec) { s.Network.Interfaces[1].Addresses = []string{"127.0.0.2/8"} }, []string{"network.interfaces[1].addresses[0]", "network.interfaces[1].gateways[0]"}},
		{"duplicate address", func(s *Spec) { s.Network.Interfaces[1].Addresses = []string{"10.2.0.5/24", "10.2.0.5/24"} }, []string{"network.interfaces[1].addresses[1]"}},
		{"ipv6 static ok", func(s *Spec) {
			s.Network.Interfaces[1].Addresses = append(s.Network.Interfaces[1].Addresses, "2001:db8::5/64")
			s.Network.Interfaces[1].Gateways = append(s.Network.Interfaces[1].Gateways, "2001:db8::1")
		}, nil},
		{"ipv6 gateway without v6", func(s *Spec) { s.Network.Interfaces[1].Gateways = []string{"2001:db8::1"} }, []string{"network.interfaces[1].gateways[0]"}},
		{"two v4 gateways", func(s *Spec) { s.Network.Interfaces[1].Gateways = []string{"10.2.0.1", "10.2.0.2"} }, []string{"network.interfaces[1].gateways[1]"}},
		{"bad gateway", func(s *Spec) { s.Network.Interfaces[1].Gateways = []string{"gw"} }, []string{"network.interfaces[1].gateways[0]"}},
		{"bad dns", func(s *Spec) { s.Network.Interfaces[1].DNS = []string{"dns.example"} }, []string{"network.interfaces[1].dns[0]"}},
		{"bad mtu", func(s *Spec) { s.Network.Interfaces[0].MTU = 100000 }, []string{"network.interfaces[0].mtu"}},
		{"nothing to configure", func(s *Spec) { s.Network.Interfaces[0] = Interface{Name: "bond0.100"} }, []string{"network.interfaces[0]"}},

		{"cache disk relative", func(s *Spec) { s.CacheDisk.Device = "sdb" }, []string{"cache_disk.device"}},
		{"cache disk dotdot", func(s *Spec) { s.CacheDisk.Device = "/dev/../etc/passwd" }, []string{"cache_disk.device"}},
		{"cache disk not dev", func(s *Spec) { s.CacheDisk.Device = "/tmp/disk" }, []string{"cache_disk.device"}},
		{"cache disk empty", func(s *Spec) { s.CacheDisk.Device = "" }, []string{"cache_disk.device"}},
		{"cache disk btrfs", func(s *Spec) { s.CacheDisk.Filesystem = "btrfs" }, []string{"cache_disk.filesystem"}},
		{"cache disk by-path ok", func(s *Spec) {
			s.CacheDisk.Device = "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1"
			s.CacheDisk.Filesystem = "ext4"
		}, nil},
		{"no cache disk ok", func(s *Spec) { s.CacheDisk = nil }, nil},

		{"label key bad", func(s *Spec) { s.NodeLabels["bad key"] = "x" }, []string{`node_labels["bad key"]`}},
		{"label value bad", func(s *Spec) { s.NodeLabels["anvil.dev/rack"] = "r 12" }, []string{`node_labels["anvil.dev/rack"]`}},
		{"label kubelet may not set", func(s *Spec) { s.NodeLabels["node-role.kubernetes.io/worker"] = "" }, []string{`node_labels["node-role.kubernetes.io/worker"]`}},
		{"taint effect", func(s *Spec) { s.Taints[0].Effect = "NoWay" }, []string{"taints[0].effect"}},
		{"taint effect empty", func(s *Spec) { s.Taints[0].Effect = "" }, []string{"taints[0].effect"}},
		{"taint key", func(s *Spec) { s.Taints[0].Key = "-x" }, []string{"taints[0].key"}},
		{"taint value", func(s *Spec) { s.Taints[0].Value = "a b" }, []string{"taints[0].value"}},
		{"taint duplicate", func(s *Spec) {
			s.Taints = append(s.Taints, Taint{Key: "dedicated", Value: "x", Effect: EffectNoSchedule})
		}, []string{"taints[1]"}},
		{"taint same key other effect ok", func(s *Spec) { s.Taints = append(s.Taints, Taint{Key: "dedicated", Effect: EffectNoExecute}) }, nil},
		{"kubelet arg managed", func(s *Spec) { s.KubeletExtraArgs["node-labels"] = "a=b" }, []string{`kubelet_extra_args["node-labels"]`}},
		{"kubelet arg dashes", func(s *Spec) { s.KubeletExtraArgs["--max-pods"] = "1" }, []string{`kubelet_extra_args["--max-pods"]`}},
		{"kubelet arg value space", func(s *Spec) { s.KubeletExtraArgs["max-pods"] = "1 --v=9" }, []string{`kubelet_extra_args["max-pods"]`}},
		{"kubelet arg value quote", func(s *Spec) { s.KubeletExtraArgs["eviction-hard"] = `memory.available<"1Gi"` }, []string{`kubelet_extra_args["eviction-hard"]`}},
		{"kubelet arg placeholder", func(s *Spec) {
			s.KubeletExtraArgs["x"] = "a" + "ANVIL_AGENT_CREDENTIAL_PLACEHOLDER_0F6C1B9E2D7A4853_REPLACED_BY_THE_BOOT_SERVICE"
		}, []string{`kubelet_extra_args["x"]`}},
		{"kubelet arg ok", func(s *Spec) { s.KubeletExtraArgs["eviction-hard"] = "memory.available<500Mi,nodefs.available<10%" }, nil},
		{"ssh key malformed", func(s *Spec) { s.SSHKeys = []string{"ssh-ed25519 nope"} }, []string{"ssh_keys[0]"}},
		{"ssh key duplicate", func(s *Spec) { s.SSHKeys = []string{keyA, keyB, keyA + "x"} }, []string{"ssh_keys[2]"}},

		{"max unavailable negative", func(s *Spec) { s.Rollout.MaxUnavailable = "-1" }, []string{"rollout.max_unavailable"}},
		{"max unavailable 101%", func(s *Spec) { s.Rollout.MaxUnavailable = "101%" }, []string{"rollout.max_unavailable"}},
		{"max unavailable garbage", func(s *Spec) { s.Rollout.MaxUnavailable = "two" }, []string{"rollout.max_unavailable"}},
		{"max unavailable 0 ok", func(s *Spec) { s.Rollout.MaxUnavailable = "0" }, nil},
		{"max unavailable 100% ok", func(s *Spec) { s.Rollout.MaxUnavailable = "100%" }, nil},
		{"pause negative", func(s *Spec) { s.Rollout.Pause = -1 }, []string{"rollout.pause"}},
		{"drain timeout tiny", func(s *Spec) { s.Rollout.DrainTimeout = Duration(time.Millisecond) }, []string{"rollout.drain_timeout"}},
		{"grace negative", func(s *Spec) { g := Duration(-time.Second); s.Rollout.DrainGracePeriod = &g }, []string{"rollout.drain_grace_period"}},
		{"node ready too long", func(s *Spec) { s.Rollout.NodeReadyTimeout = Duration(48 * time.Hour) }, []string{"rollout.node_ready_timeout"}},
		{"window ok", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: []string{"sat", "sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"}}
		}, nil},
		{"window bad zone", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Mars/Olympus"}}
		}, []string{"rollout.maintenance_windows[0].time_zone"}},
		{"window Local zone", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: []string{"sat"}, Start: "22:00", End: "04:00", TimeZone: "Local"}}
		}, []string{"rollout.maintenance_windows[0].time_zone"}},
		{"window everything wrong", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: []string{"sat"}}, {Days: []string{"Sat", "sun", "sun"}, Start: "24:00", End: "7:00"}}
		}, []string{
			"rollout.maintenance_windows[0].end", "rollout.maintenance_windows[0].start", "rollout.maintenance_windows[0].time_zone",
			"rollout.maintenance_windows[1].days[0]", "rollout.maintenance_windows[1].days[2]", "rollout.maintenance_windows[1].end",
			"rollout.maintenance_windows[1].start", "rollout.maintenance_windows[1].time_zone",
		}},
		{"window empty", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: nil, Start: "10:00", End: "10:00", TimeZone: "UTC"}}
		}, []string{"rollout.maintenance_windows[0].days", "rollout.maintenance_windows[0].end"}},
		{"many problems at once", func(s *Spec) {
			s.DisplayName = ""
			s.Network.VLANs[0].ID = 5000
			s.Taints[0].Effect = "Never"
			s.SSHKeys = []string{"nope"}
		}, []string{"display_name", "network.vlans[0].id", "ssh_keys[0]", "taints[0].effect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			err := s.Validate()
			if got := fieldsOf(err); fmt.Sprint(got) != fmt.Sprint(tt.fields) {
				t.Fatalf("fields = %q\nwant     %q\nerr: %v", got, tt.fields, err)
			}
			if err != nil {
				if !errs.Is(err, errs.KindValidation) {
					t.Fatalf("kind = %v", errs.KindOf(err))
				}
				for _, f := range errs.As(err).Fields {
					if strings.TrimSpace(f.Reason) == "" {
						t.Fatalf("field %s has no reason", f.Field)
					}
				}
			}
		})
	}
}

func TestMachineSettingsValidation(t *testing.T) {
	for _, tt := range []struct {
		s      MachineSettings
		fields []string
	}{
		{MachineSettings{Hostname: "node-1.dc1"}, nil},
		{MachineSettings{Hostname: "Node_1"}, []string{"hostname"}},
		{MachineSettings{Hostname: ""}, []string{"hostname"}},
		{MachineSettings{Hostname: "n1", Labels: map[string]string{"a": "b c"}}, []string{`labels["a"]`}},
	} {
		if got := fieldsOf(tt.s.Validate()); fmt.Sprint(got) != fmt.Sprint(tt.fields) {
			t.Errorf("%+v: fields %v, want %v", tt.s, got, tt.fields)
		}
	}
}
