package pool

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// Revision is an immutable, numbered snapshot of a pool's Config.
type Revision struct {
	Number       int       `json:"number"`
	Hash         string    `json:"hash"`
	Config       Config    `json:"config"`
	Author       string    `json:"author"`
	Message      string    `json:"message,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	PlatformMade bool      `json:"platform_made"`
}

// Hash is "sha256:<hex>" over the canonical encoding of the normalized
// config: JSON with fields in declaration order, map keys sorted, empty
// fields omitted (so adding an optional field later keeps old hashes),
// and set-like lists sorted (so reordering is not a change).
func (c Config) Hash() string {
	b, err := json.Marshal(c.Normalize())
	if err != nil {
		// Config holds only strings, ints, bools, maps and slices of those.
		panic("pool: config does not marshal: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Normalize returns a deep copy in canonical form: set-like lists sorted,
// addresses in their canonical spelling, defaults spelled as empty. Order
// that means something (DNS servers, addresses, gateways) is kept.
func (c Config) Normalize() Config {
	out := c
	if m, err := catalog.ParseMinor(c.Kubernetes.Minor); err == nil {
		out.Kubernetes.Minor = m.String()
	}
	out.Network = c.Network.normalize()
	if c.CacheDisk != nil {
		d := *c.CacheDisk
		out.CacheDisk = &d
	}
	out.NodeLabels = cloneMap(c.NodeLabels)
	out.KubeletExtraArgs = cloneMap(c.KubeletExtraArgs)
	out.Taints = slices.Clone(c.Taints)
	slices.SortStableFunc(out.Taints, func(a, b Taint) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Effect, b.Effect), cmp.Compare(a.Value, b.Value))
	})
	out.SSHKeys = sortedClone(c.SSHKeys)
	if len(out.Taints) == 0 {
		out.Taints = nil
	}
	return out
}

func (n Network) normalize() Network {
	var out Network
	for _, b := range n.Bonds {
		b.Members = sortedClone(b.Members)
		out.Bonds = append(out.Bonds, b)
	}
	slices.SortStableFunc(out.Bonds, func(a, b Bond) int { return cmp.Compare(a.Name, b.Name) })
	for _, v := range n.VLANs {
		if v.Name == (VLAN{ID: v.ID, Parent: v.Parent}).EffectiveName() {
			v.Name = ""
		}
		out.VLANs = append(out.VLANs, v)
	}
	slices.SortStableFunc(out.VLANs, func(a, b VLAN) int {
		return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.ID, b.ID))
	})
	for _, b := range n.Bridges {
		b.Members = sortedClone(b.Members)
		out.Bridges = append(out.Bridges, b)
	}
	slices.SortStableFunc(out.Bridges, func(a, b Bridge) int { return cmp.Compare(a.Name, b.Name) })
	for _, in := range n.Interfaces {
		in.Addresses = mapStrings(in.Addresses, func(s string) string {
			if p, err := netip.ParsePrefix(s); err == nil {
				return p.String()
			}
			return s
		})
		canonAddr := func(s string) string {
			if a, err := netip.ParseAddr(s); err == nil {
				return a.String()
			}
			return s
		}
		in.Gateways = mapStrings(in.Gateways, canonAddr)
		in.DNS = mapStrings(in.DNS, canonAddr)
		out.Interfaces = append(out.Interfaces, in)
	}
	slices.SortStableFunc(out.Interfaces, func(a, b Interface) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func sortedClone(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func mapStrings(s []string, f func(string) string) []string {
	if len(s) == 0 {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
