package pool

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
)

// Limits keep one pool's config (and its rendered Ignition) bounded.
const (
	maxListLen   = 64
	maxMembers   = 16
	maxLabels    = 100
	maxArgValue  = 1024
	maxAddresses = 32
)

var (
	ifNameRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)
	flatcarVerRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$`)
	argNameRe    = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	devicePathRe = regexp.MustCompile(`^/dev/[A-Za-z0-9/_.:+@=,-]+$`)
)

// managedKubeletArgs are set by anvil itself; letting a user override them
// would break joining or labelling.
var managedKubeletArgs = map[string]string{
	"node-labels":                "use node_labels",
	"register-with-taints":       "use taints",
	"hostname-override":          "the machine's hostname is used",
	"kubeconfig":                 "kubeadm manages it",
	"bootstrap-kubeconfig":       "kubeadm manages it",
	"config":                     "kubeadm manages it",
	"container-runtime-endpoint": "anvil configures containerd",
}

// Validate checks the whole spec and reports every problem at once.
func (s Spec) Validate() error {
	var f errs.Fields
	if err := check.DisplayName(s.DisplayName); err != nil {
		f.Add("display_name", "%v", err)
	}
	f.Merge("", s.Config.Validate())
	f.Merge("rollout", s.Rollout.Validate())
	return f.Err()
}

// Validate checks the reboot-relevant config on its own (the catalog and
// skew checks need the cluster, and happen when deciding a command).
func (c Config) Validate() error {
	var f errs.Fields
	if c.Kubernetes.Minor == "" {
		f.Add("kubernetes.minor", "must be set, e.g. \"1.33\"")
	} else if _, err := catalog.ParseMinor(c.Kubernetes.Minor); err != nil {
		f.Add("kubernetes.minor", "%v", err)
	}
	switch c.Flatcar.Channel {
	case ChannelStable, ChannelBeta, ChannelAlpha, ChannelLTS:
	case "":
		f.Add("flatcar.channel", "must be set: stable, beta, alpha or lts")
	default:
		f.Add("flatcar.channel", "must be one of stable, beta, alpha, lts, got %q", c.Flatcar.Channel)
	}
	if !flatcarVerRe.MatchString(c.Flatcar.Version) {
		f.Add("flatcar.version", "must be a Flatcar release such as \"4230.2.3\", got %q", c.Flatcar.Version)
	}
	f.Merge("network", c.Network.Validate())
	if c.CacheDisk != nil {
		f.Merge("cache_disk", c.CacheDisk.Validate())
	}
	validateNodeLabels(&f, "node_labels", c.NodeLabels)
	validateTaints(&f, c.Taints)
	validateKubeletArgs(&f, c.KubeletExtraArgs)
	validateSSHKeys(&f, c.SSHKeys)
	return f.Err()
}

// validateNodeLabels checks labels the kubelet sets on its node (pool node
// labels and machine labels alike).
func validateNodeLabels(f *errs.Fields, prefix string, labels map[string]string) {
	if len(labels) > maxLabels {
		f.Add(prefix, "at most %d labels, got %d", maxLabels, len(labels))
		return
	}
	for _, k := range sortedKeys(labels) {
		field := fmt.Sprintf("%s[%q]", prefix, k)
		if err := check.NodeLabelKey(k); err != nil {
			f.Add(field, "key: %v", err)
		}
		if err := check.LabelValue(labels[k]); err != nil {
			f.Add(field, "value: %v", err)
		}
	}
}

func validateTaints(f *errs.Fields, taints []Taint) {
	if len(taints) > maxListLen {
		f.Add("taints", "at most %d taints, got %d", maxListLen, len(taints))
		return
	}
	seen := map[[2]string]int{}
	for i, t := range taints {
		p := fmt.Sprintf("taints[%d]", i)
		if err := check.LabelKey(t.Key); err != nil {
			f.Add(p+".key", "%v", err)
		}
		if err := check.LabelValue(t.Value); err != nil {
			f.Add(p+".value", "%v", err)
		}
		switch t.Effect {
		case EffectNoSchedule, EffectPreferNoSchedule, EffectNoExecute:
		default:
			f.Add(p+".effect", "must be NoSchedule, PreferNoSchedule or NoExecute, got %q", t.Effect)
		}
		if j, dup := seen[[2]string{t.Key, t.Effect}]; dup {
			f.Add(p, "duplicates taints[%d] (same key and effect)", j)
		}
		seen[[2]string{t.Key, t.Effect}] = i
	}
}

func validateKubeletArgs(f *errs.Fields, args map[string]string) {
	if len(args) > maxListLen {
		f.Add("kubelet_extra_args", "at most %d arguments, got %d", maxListLen, len(args))
		return
	}
	for _, k := range sortedKeys(args) {
		p := fmt.Sprintf("kubelet_extra_args[%q]", k)
		v := args[k]
		if len(k) > 64 || !argNameRe.MatchString(k) {
			f.Add(p, "flag name must be lowercase words joined by '-', without leading dashes (e.g. \"max-pods\")")
		} else if why, ok := managedKubeletArgs[k]; ok {
			f.Add(p, "is managed by anvil (%s)", why)
		}
		// kubeadm writes these unquoted into a shell-style env file, so a
		// value with spaces or quotes would be split or break the file.
		if len(v) > maxArgValue {
			f.Add(p, "value must be at most %d characters", maxArgValue)
		}
		for _, r := range v {
			if r <= ' ' || r > '~' || strings.ContainsRune("\"'`\\$", r) {
				f.Add(p, "value must be printable ASCII without spaces, quotes, backslashes or '$'")
				break
			}
		}
		if err := check.NoPlaceholder(v); err != nil {
			f.Add(p, "%v", err)
		}
	}
}

func validateSSHKeys(f *errs.Fields, keys []string) {
	if len(keys) > maxListLen {
		f.Add("ssh_keys", "at most %d keys, got %d", maxListLen, len(keys))
		return
	}
	seen := map[string]int{}
	for i, k := range keys {
		p := fmt.Sprintf("ssh_keys[%d]", i)
		if err := check.SSHAuthorizedKey(k); err != nil {
			f.Add(p, "%v", err)
			continue
		}
		if err := check.NoPlaceholder(k); err != nil {
			f.Add(p, "%v", err)
		}
		fields := strings.Fields(k)
		id := fields[0] + " " + fields[1]
		if j, dup := seen[id]; dup {
			f.Add(p, "same key as ssh_keys[%d]", j)
		}
		seen[id] = i
	}
}

// Validate checks the cache disk.
func (d CacheDisk) Validate() error {
	var f errs.Fields
	switch {
	case d.Device == "":
		f.Add("device", "must be set to a device path, preferably /dev/disk/by-id/...")
	case len(d.Device) > 255 || !devicePathRe.MatchString(d.Device) || path.Clean(d.Device) != d.Device:
		f.Add("device", "must be a clean absolute path under /dev/ such as /dev/disk/by-id/nvme-..., got %q", d.Device)
	}
	switch d.Filesystem {
	case "ext4", "xfs":
	default:
		f.Add("filesystem", "must be ext4 or xfs, got %q", d.Filesystem)
	}
	return f.Err()
}

// Validate checks the network profile: names, VLAN ids, addresses, and
// that every device has at most one role (a NIC in two bonds, a bond member
// that is also addressed, a VLAN on a bridge port... are refused).
func (n Network) Validate() error {
	var f errs.Fields
	for _, l := range []struct {
		name string
		len  int
	}{{"bonds", len(n.Bonds)}, {"vlans", len(n.VLANs)}, {"bridges", len(n.Bridges)}, {"interfaces", len(n.Interfaces)}} {
		if l.len > maxListLen {
			f.Add(l.name, "at most %d entries, got %d", maxListLen, l.len)
		}
	}
	if len(f) > 0 {
		return f.Err()
	}

	// kinds of the declared (virtual) devices, and where each was declared.
	kind := map[string]string{}
	declared := map[string]string{}
	declare := func(p, name, k string) {
		if prev, dup := declared[name]; dup {
			f.Add(p, "device name %q is already used by %s", name, prev)
			return
		}
		kind[name] = k
		declared[name] = p
	}
	for i, b := range n.Bonds {
		p := fmt.Sprintf("bonds[%d]", i)
		if err := ifName(b.Name); err != nil {
			f.Add(p+".name", "%v", err)
		} else {
			declare(p+".name", b.Name, "bond")
		}
	}
	for i, b := range n.Bridges {
		p := fmt.Sprintf("bridges[%d]", i)
		if err := ifName(b.Name); err != nil {
			f.Add(p+".name", "%v", err)
		} else {
			declare(p+".name", b.Name, "bridge")
		}
	}
	vlanKeys := map[[2]any]int{}
	for i, v := range n.VLANs {
		p := fmt.Sprintf("vlans[%d]", i)
		if v.ID < 1 || v.ID > 4094 {
			f.Add(p+".id", "must be between 1 and 4094, got %d", v.ID)
		}
		if err := ifName(v.Parent); err != nil {
			f.Add(p+".parent", "%v", err)
		}
		if v.Name != "" {
			if err := ifName(v.Name); err != nil {
				f.Add(p+".name", "%v", err)
			}
		} else if v.Parent != "" {
			if err := ifName(v.EffectiveName()); err != nil {
				f.Add(p+".name", "the default name %q is not usable (%v); set a name", v.EffectiveName(), err)
			}
		}
		if j, dup := vlanKeys[[2]any{v.Parent, v.ID}]; dup {
			f.Add(p, "duplicates vlans[%d] (same parent and id)", j)
		}
		vlanKeys[[2]any{v.Parent, v.ID}] = i
		if ifName(v.EffectiveName()) == nil {
			declare(p+".name", v.EffectiveName(), "vlan")
		}
	}

	// master records which bond or bridge enslaves a device.
	master := map[string]string{}
	enslave := func(p, dev, owner string) {
		if prev, dup := master[dev]; dup {
			f.Add(p, "interface %q is already a member of %s", dev, prev)
			return
		}
		master[dev] = owner
	}
	for i, b := range n.Bonds {
		p := fmt.Sprintf("bonds[%d]", i)
		if !slices.Contains(BondModes, b.Mode) {
			f.Add(p+".mode", "must be one of %s, got %q", strings.Join(BondModes, ", "), b.Mode)
		}
		if len(b.Members) == 0 {
			f.Add(p+".members", "a bond needs at least one member interface")
		}
		if len(b.Members) > maxMembers {
			f.Add(p+".members", "at most %d members, got %d", maxMembers, len(b.Members))
			continue
		}
		for j, m := range b.Members {
			mp := fmt.Sprintf("%s.members[%d]", p, j)
			if err := ifName(m); err != nil {
				f.Add(mp, "%v", err)
				continue
			}
			if k, virtual := kind[m]; virtual {
				f.Add(mp, "bond members must be physical interfaces, %q is a %s", m, k)
				continue
			}
			enslave(mp, m, fmt.Sprintf("bond %q", b.Name))
		}
	}
	for i, b := range n.Bridges {
		p := fmt.Sprintf("bridges[%d]", i)
		if len(b.Members) > maxMembers {
			f.Add(p+".members", "at most %d members, got %d", maxMembers, len(b.Members))
			continue
		}
		for j, m := range b.Members {
			mp := fmt.Sprintf("%s.members[%d]", p, j)
			if err := ifName(m); err != nil {
				f.Add(mp, "%v", err)
				continue
			}
			if kind[m] == "bridge" {
				f.Add(mp, "a bridge cannot be a member of a bridge")
				continue
			}
			enslave(mp, m, fmt.Sprintf("bridge %q", b.Name))
		}
	}
	for i, v := range n.VLANs {
		p := fmt.Sprintf("vlans[%d].parent", i)
		if kind[v.Parent] == "vlan" {
			f.Add(p, "stacked VLANs (QinQ) are not supported; %q is a VLAN", v.Parent)
		}
		if m, ok := master[v.Parent]; ok {
			f.Add(p, "%q is a member of %s; put the VLAN on that device instead", v.Parent, m)
		}
	}

	seen := map[string]int{}
	for i, in := range n.Interfaces {
		p := fmt.Sprintf("interfaces[%d]", i)
		if err := ifName(in.Name); err != nil {
			f.Add(p+".name", "%v", err)
		} else {
			if j, dup := seen[in.Name]; dup {
				f.Add(p+".name", "interface %q is already configured by interfaces[%d]", in.Name, j)
			}
			seen[in.Name] = i
			if m, ok := master[in.Name]; ok {
				f.Add(p+".name", "interface %q is a member of %s and cannot be addressed directly; address %s instead", in.Name, m, m)
			}
		}
		validateAddressing(&f, p, in)
	}
	return f.Err()
}

func validateAddressing(f *errs.Fields, p string, in Interface) {
	var has4, has6 bool
	switch in.DHCP {
	case DHCPNone:
	case DHCPv4:
		has4 = true
	case DHCPv6:
		has6 = true
	case DHCPBoth:
		has4, has6 = true, true
	default:
		f.Add(p+".dhcp", "must be empty, ipv4, ipv6 or both, got %q", in.DHCP)
	}
	if len(in.Addresses) > maxAddresses || len(in.Gateways) > 2 || len(in.DNS) > 8 {
		f.Add(p, "at most %d addresses, 2 gateways (one per family) and 8 DNS servers", maxAddresses)
		return
	}
	seen := map[netip.Prefix]bool{}
	for j, a := range in.Addresses {
		ap := fmt.Sprintf("%s.addresses[%d]", p, j)
		pfx, err := netip.ParsePrefix(a)
		if err != nil || pfx.Addr().Zone() != "" || pfx.Addr().Is4In6() {
			f.Add(ap, "must be an address in CIDR notation such as 10.0.0.5/24 or 2001:db8::5/64, got %q", a)
			continue
		}
		ip := pfx.Addr()
		if ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() {
			f.Add(ap, "%s is not a usable host address", ip)
			continue
		}
		if seen[pfx] {
			f.Add(ap, "%s is listed twice", pfx)
		}
		seen[pfx] = true
		has4 = has4 || ip.Is4()
		has6 = has6 || ip.Is6()
	}
	gwFamilies := map[bool]bool{}
	for j, g := range in.Gateways {
		gp := fmt.Sprintf("%s.gateways[%d]", p, j)
		ip, err := netip.ParseAddr(g)
		if err != nil || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() || ip.IsMulticast() {
			f.Add(gp, "must be an IP address, got %q", g)
			continue
		}
		if gwFamilies[ip.Is4()] {
			f.Add(gp, "only one gateway per address family")
		}
		gwFamilies[ip.Is4()] = true
		if ip.Is4() && !has4 {
			f.Add(gp, "IPv4 gateway %s, but the interface has no IPv4 address or IPv4 DHCP", ip)
		}
		if ip.Is6() && !has6 {
			f.Add(gp, "IPv6 gateway %s, but the interface has no IPv6 address or IPv6 DHCP", ip)
		}
	}
	for j, d := range in.DNS {
		ip, err := netip.ParseAddr(d)
		if err != nil || ip.Zone() != "" || ip.Is4In6() || ip.IsUnspecified() || ip.IsMulticast() {
			f.Add(fmt.Sprintf("%s.dns[%d]", p, j), "must be an IP address, got %q", d)
		}
	}
	if in.MTU != 0 && (in.MTU < 576 || in.MTU > 9216) {
		f.Add(p+".mtu", "must be between 576 and 9216, got %d", in.MTU)
	}
	if in.DHCP == DHCPNone && len(in.Addresses) == 0 && in.MTU == 0 {
		f.Add(p, "nothing to configure: set dhcp, addresses or mtu")
	}
}

// ifName checks a Linux interface name (IFNAMSIZ allows 15 characters).
func ifName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case len(s) > 15:
		return fmt.Errorf("interface names are at most 15 characters, got %q (%d)", s, len(s))
	case !ifNameRe.MatchString(s):
		return fmt.Errorf("must be letters, digits, '_', '.' or '-', starting with a letter or digit, got %q", s)
	}
	return nil
}

// EffectiveName is the VLAN device's name.
func (v VLAN) EffectiveName() string {
	if v.Name != "" {
		return v.Name
	}
	return fmt.Sprintf("%s.%d", v.Parent, v.ID)
}
