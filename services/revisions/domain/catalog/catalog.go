// Package catalog lists the Kubernetes versions anvil can boot machines
// with, and holds the version skew policy between a cluster's control plane
// and its kubelets.
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Version is a full Kubernetes version x.y.z.
type Version struct{ Major, Minor, Patch int }

// Minor is a Kubernetes minor version x.y, the part a user chooses.
type Minor struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }
func (v Version) IsZero() bool   { return v == Version{} }
func (v Version) MinorOf() Minor { return Minor{v.Major, v.Minor} }
func (m Minor) String() string   { return fmt.Sprintf("%d.%d", m.Major, m.Minor) }

// Compare orders versions: -1, 0 or +1.
func (v Version) Compare(o Version) int {
	if c := v.MinorOf().Compare(o.MinorOf()); c != 0 {
		return c
	}
	switch {
	case v.Patch < o.Patch:
		return -1
	case v.Patch > o.Patch:
		return 1
	}
	return 0
}

// Compare orders minors: -1, 0 or +1.
func (m Minor) Compare(o Minor) int {
	switch {
	case m.Major != o.Major:
		if m.Major < o.Major {
			return -1
		}
		return 1
	case m.Minor < o.Minor:
		return -1
	case m.Minor > o.Minor:
		return 1
	}
	return 0
}

// ParseVersion reads "1.33.4" (a leading "v" is accepted).
func ParseVersion(s string) (Version, error) {
	n, err := parseNums(s, 3)
	if err != nil {
		return Version{}, fmt.Errorf("%q is not a Kubernetes version of the form x.y.z: %w", s, err)
	}
	return Version{n[0], n[1], n[2]}, nil
}

// ParseMinor reads "1.33" (a leading "v" is accepted).
func ParseMinor(s string) (Minor, error) {
	n, err := parseNums(s, 2)
	if err != nil {
		return Minor{}, fmt.Errorf("%q is not a Kubernetes minor version of the form x.y: %w", s, err)
	}
	return Minor{n[0], n[1]}, nil
}

func parseNums(s string, want int) ([]int, error) {
	s = strings.TrimPrefix(s, "v")
	parts := strings.Split(s, ".")
	if len(parts) != want {
		return nil, fmt.Errorf("want %d dot-separated numbers", want)
	}
	out := make([]int, want)
	for i, p := range parts {
		// No leading zeros or signs, so that each version has one spelling.
		if p == "" || len(p) > 6 || (len(p) > 1 && p[0] == '0') || strings.TrimLeft(p, "0123456789") != "" {
			return nil, errors.New("each part must be a number without leading zeros")
		}
		out[i], _ = strconv.Atoi(p)
	}
	return out, nil
}

// Catalog is an immutable, sorted set of supported versions.
type Catalog struct{ versions []Version }

// New builds a catalog from version strings.
func New(versions ...string) (Catalog, error) {
	var c Catalog
	var f errs.Fields
	for i, s := range versions {
		v, err := ParseVersion(s)
		if err != nil {
			f.Add(fmt.Sprintf("versions[%d]", i), "%v", err)
			continue
		}
		c = c.With(v)
	}
	return c, f.Err()
}

// MustNew is New for tests and static tables.
func MustNew(versions ...string) Catalog {
	c, err := New(versions...)
	if err != nil {
		panic(err)
	}
	return c
}

// With returns a catalog that also lists v.
func (c Catalog) With(v Version) Catalog {
	i, found := slices.BinarySearchFunc(c.versions, v, Version.Compare)
	if found {
		return c
	}
	return Catalog{versions: slices.Insert(slices.Clone(c.versions), i, v)}
}

// Versions returns every version, oldest first.
func (c Catalog) Versions() []Version { return slices.Clone(c.versions) }

// Has reports whether v is supported.
func (c Catalog) Has(v Version) bool {
	_, found := slices.BinarySearchFunc(c.versions, v, Version.Compare)
	return found
}

// Minors returns the supported minors, oldest first.
func (c Catalog) Minors() []Minor {
	var out []Minor
	for _, v := range c.versions {
		if len(out) == 0 || out[len(out)-1] != v.MinorOf() {
			out = append(out, v.MinorOf())
		}
	}
	return out
}

// Latest resolves a minor to its newest supported patch.
func (c Catalog) Latest(m Minor) (Version, error) {
	var best Version
	for _, v := range c.versions {
		if v.MinorOf() == m {
			best = v
		}
	}
	if best.IsZero() {
		return Version{}, fmt.Errorf("minor %s of Kubernetes is not supported (supported minors: %s)", m, c.minorList())
	}
	return best, nil
}

func (c Catalog) minorList() string {
	ms := c.Minors()
	if len(ms) == 0 {
		return "none"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, ", ")
}

// MaxKubeletMinorsBehind is how many minors a kubelet may trail the control
// plane (Kubernetes' skew policy since 1.28).
const MaxKubeletMinorsBehind = 3

// CheckSkew applies the version skew policy to a kubelet and its control
// plane: the kubelet is never newer than the control plane (compared on
// the full version, so the control plane is upgraded first even for a
// patch), and at most three minors older. The error states both versions.
func CheckSkew(controlPlane, kubelet Version) error {
	if kubelet.Compare(controlPlane) > 0 {
		return fmt.Errorf("kubelet %s would be newer than the control plane %s; upgrade the control plane first", kubelet, controlPlane)
	}
	if kubelet.Major != controlPlane.Major || controlPlane.Minor-kubelet.Minor > MaxKubeletMinorsBehind {
		return fmt.Errorf("kubelet %s would be more than %d minor versions older than the control plane %s", kubelet, MaxKubeletMinorsBehind, controlPlane)
	}
	return nil
}

// CheckKubelet refuses a kubelet version that is not in the catalog or that
// breaks the skew policy against the control plane.
func (c Catalog) CheckKubelet(controlPlane, kubelet Version) error {
	if !c.Has(kubelet) {
		return fmt.Errorf("kubelet %s is not in the catalog of supported Kubernetes versions", kubelet)
	}
	if controlPlane.IsZero() {
		return errors.New("the cluster's control plane version is not known, so the skew policy cannot be checked")
	}
	return CheckSkew(controlPlane, kubelet)
}
