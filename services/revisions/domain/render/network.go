package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// networkFile is one systemd-networkd file.
type networkFile struct {
	Path     string
	Contents string
}

// networkdDir is where the units go; names start with 10-/20- so they win
// over Flatcar's zz-default.network (DHCP on every NIC), which still
// applies to NICs the profile does not mention.
const networkdDir = "/etc/systemd/network/"

// linkConfig collects everything said about one device before it is
// written as a single .network file (networkd applies only the first
// .network file that matches a link, so one device must have one file).
type linkConfig struct {
	name     string
	master   string // "Bond=bond0" or "Bridge=br0"
	vlans    []string
	iface    *pool.Interface
	l2only   bool // carries no addresses of its own
	mtuBytes int
}

// renderNetwork turns a validated network profile into .netdev and
// .network files, sorted by path. Every value written comes from a
// validated name, a number or a canonically re-printed address, so no
// user text can add lines or sections.
func renderNetwork(n pool.Network) []networkFile {
	var files []networkFile
	links := map[string]*linkConfig{}
	link := func(name string) *linkConfig {
		if l, ok := links[name]; ok {
			return l
		}
		l := &linkConfig{name: name, l2only: true}
		links[name] = l
		return l
	}

	for _, b := range n.Bonds {
		files = append(files, networkFile{
			Path:     networkdDir + "10-anvil-" + b.Name + ".netdev",
			Contents: fmt.Sprintf("[NetDev]\nName=%s\nKind=bond\n\n[Bond]\nMode=%s\nMIIMonitorSec=100ms\n", b.Name, b.Mode),
		})
		link(b.Name)
		for _, m := range b.Members {
			link(m).master = "Bond=" + b.Name
		}
	}
	for _, b := range n.Bridges {
		files = append(files, networkFile{
			Path:     networkdDir + "10-anvil-" + b.Name + ".netdev",
			Contents: fmt.Sprintf("[NetDev]\nName=%s\nKind=bridge\n", b.Name),
		})
		link(b.Name)
		for _, m := range b.Members {
			link(m).master = "Bridge=" + b.Name
		}
	}
	for _, v := range n.VLANs {
		name := v.EffectiveName()
		files = append(files, networkFile{
			Path:     networkdDir + "10-anvil-" + name + ".netdev",
			Contents: fmt.Sprintf("[NetDev]\nName=%s\nKind=vlan\n\n[VLAN]\nId=%d\n", name, v.ID),
		})
		link(name)
		p := link(v.Parent)
		p.vlans = append(p.vlans, name)
	}
	for i := range n.Interfaces {
		in := &n.Interfaces[i]
		l := link(in.Name)
		l.iface = in
		l.mtuBytes = in.MTU
		l.l2only = in.DHCP == pool.DHCPNone && len(in.Addresses) == 0
	}

	for _, name := range sortedLinkNames(links) {
		files = append(files, networkFile{
			Path:     networkdDir + "20-anvil-" + name + ".network",
			Contents: links[name].render(),
		})
	}
	slices.SortFunc(files, func(a, b networkFile) int { return strings.Compare(a.Path, b.Path) })
	return files
}

func (l *linkConfig) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Match]\nName=%s\n", l.name)

	var link []string
	if l.mtuBytes != 0 {
		link = append(link, fmt.Sprintf("MTUBytes=%d", l.mtuBytes))
	}
	if l.l2only {
		// A bond member, trunk or bare bridge has no address to wait for;
		// without this, boot waits for network-online until it times out
		// (and a bond with one dead member would block it).
		link = append(link, "RequiredForOnline=no")
	}
	if len(link) > 0 {
		fmt.Fprintf(&b, "\n[Link]\n%s\n", strings.Join(link, "\n"))
	}

	b.WriteString("\n[Network]\n")
	if l.master != "" {
		b.WriteString(l.master + "\n")
	}
	if in := l.iface; in != nil {
		switch in.DHCP {
		case pool.DHCPv4:
			b.WriteString("DHCP=ipv4\n")
		case pool.DHCPv6:
			b.WriteString("DHCP=ipv6\n")
		case pool.DHCPBoth:
			b.WriteString("DHCP=yes\n")
		}
		for _, a := range in.Addresses {
			b.WriteString("Address=" + a + "\n")
		}
		for _, g := range in.Gateways {
			b.WriteString("Gateway=" + g + "\n")
		}
		for _, d := range in.DNS {
			b.WriteString("DNS=" + d + "\n")
		}
	}
	if l.l2only && l.master == "" {
		b.WriteString("LinkLocalAddressing=no\n")
	}
	for _, v := range l.vlans {
		b.WriteString("VLAN=" + v + "\n")
	}
	return b.String()
}

func sortedLinkNames(m map[string]*linkConfig) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
