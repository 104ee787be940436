// Package catalog lists the Kubernetes versions anvil can boot machines
// with, and holds the version skew policy between a cluster's control plane
// and its kubelets.
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// Version is a full Kubernetes version x.y.z, and Minor a minor version
// x.y, the part a user chooses. They are libs/fields/values', whose skew
// policy the rollout service checks too.
type (
	Version = values.KubeVersion
	Minor   = values.KubeMinor
)

// ParseVersion reads "1.33.4" (a leading "v" is accepted).
func ParseVersion(s string) (Version, error) { return values.ParseKubeVersion(s) }

// ParseMinor reads "1.33" (a leading "v" is accepted).
func ParseMinor(s string) (Minor, error) { return values.ParseKubeMinor(s) }

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
const MaxKubeletMinorsBehind = values.MaxKubeletMinorsBehind

// CheckSkew applies the version skew policy to a kubelet and its control
// plane (values.CheckKubeletSkew).
func CheckSkew(controlPlane, kubelet Version) error {
	return values.CheckKubeletSkew(controlPlane, kubelet)
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
