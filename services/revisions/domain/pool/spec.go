package pool

// Spec is everything a user sets on a pool. The embedded Config is the
// reboot-relevant part that revisions snapshot; DisplayName, Rollout and
// AutoApplyPlatformRevisions change the pool without a revision. See
// docs/pool-fields.md.
type Spec struct {
	DisplayName string `json:"display_name"`
	Config
	Rollout Rollout `json:"rollout"`
	// AutoApplyPlatformRevisions: a platform-made revision (a Kubernetes
	// patch release) is also requested for rollout as soon as it is made;
	// the rollout then waits for the pool's maintenance windows.
	AutoApplyPlatformRevisions bool `json:"auto_apply_platform_revisions,omitempty"`
}

// Config is the part of a pool that needs a reboot to take effect. A
// revision is an immutable, hashed snapshot of it.
type Config struct {
	Kubernetes       Kubernetes        `json:"kubernetes"`
	Flatcar          Flatcar           `json:"flatcar"`
	Network          Network           `json:"network"`
	CacheDisk        *CacheDisk        `json:"cache_disk,omitempty"`
	NodeLabels       map[string]string `json:"node_labels,omitempty"`
	Taints           []Taint           `json:"taints,omitempty"`
	KubeletExtraArgs map[string]string `json:"kubelet_extra_args,omitempty"`
	SSHKeys          []string          `json:"ssh_keys,omitempty"`
}

// Kubernetes holds the minor the user chose and the full version the
// platform resolved it to. Version is ignored on input.
type Kubernetes struct {
	Minor   string `json:"minor"`
	Version string `json:"version,omitempty"`
}

// Flatcar channels.
const (
	ChannelStable = "stable"
	ChannelBeta   = "beta"
	ChannelAlpha  = "alpha"
	ChannelLTS    = "lts"
)

// Flatcar selects the OS image the boot service serves.
type Flatcar struct {
	Channel string `json:"channel"`
	Version string `json:"version"`
}

// Network is the pool's network profile, rendered to systemd-networkd units.
// Interfaces refer to devices by name: physical NICs (eno1), or the bonds,
// VLANs and bridges declared here.
type Network struct {
	Bonds      []Bond      `json:"bonds,omitempty"`
	VLANs      []VLAN      `json:"vlans,omitempty"`
	Bridges    []Bridge    `json:"bridges,omitempty"`
	Interfaces []Interface `json:"interfaces,omitempty"`
}

// Bond aggregates physical NICs.
type Bond struct {
	Name    string   `json:"name"`
	Mode    string   `json:"mode"`
	Members []string `json:"members"`
}

// BondModes are the Linux bonding modes (systemd.netdev [Bond] Mode=).
var BondModes = []string{"balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"}

// VLAN is a tagged sub-interface of Parent. Name defaults to
// "<parent>.<id>"; set it when that is longer than 15 characters.
type VLAN struct {
	ID     int    `json:"id"`
	Parent string `json:"parent"`
	Name   string `json:"name,omitempty"`
}

// Bridge joins devices into one L2 segment (e.g. for VMs).
type Bridge struct {
	Name    string   `json:"name"`
	Members []string `json:"members"`
}

// DHCP modes for an interface.
const (
	DHCPNone = ""
	DHCPv4   = "ipv4"
	DHCPv6   = "ipv6"
	DHCPBoth = "both"
)

// Interface is the addressing of one device.
type Interface struct {
	Name      string   `json:"name"`
	DHCP      string   `json:"dhcp,omitempty"`
	Addresses []string `json:"addresses,omitempty"` // CIDR, e.g. 10.0.0.5/24
	Gateways  []string `json:"gateways,omitempty"`
	DNS       []string `json:"dns,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
}

// CacheDisk is the ephemeral disk that holds containerd's images, mounted
// at /var/lib/containerd. Device is a path (prefer /dev/disk/by-id/...);
// Ignition has no way to pick "the largest non-boot disk", so neither
// does anvil.
type CacheDisk struct {
	Device     string `json:"device"`
	Filesystem string `json:"filesystem"`
	Wipe       bool   `json:"wipe"`
}

// Taint effects.
const (
	EffectNoSchedule       = "NoSchedule"
	EffectPreferNoSchedule = "PreferNoSchedule"
	EffectNoExecute        = "NoExecute"
)

// Taint is registered with the node when it joins.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}
