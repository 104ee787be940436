package catalog

import (
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// The catalog is one platform-wide aggregate (org "_platform", type
// "catalog", id "kubernetes"). It is seeded once, on the service's first
// start, and then grows one version at a time through AddVersion, a
// platform administrator's command. A version added this way is what makes
// the platform raise the patch version of every pool on its minor.

// Seeded records the catalog's initial versions (the service's
// configuration on its first start). It makes no platform revisions: no
// pool can exist before the catalog does.
type Seeded struct {
	Versions []string `json:"versions"`
}

// VersionAdded records a version that joined the catalog.
type VersionAdded struct {
	Version string `json:"version"`
}

func (Seeded) EventType() string       { return "catalog.seeded" }
func (VersionAdded) EventType() string { return "catalog.version_added" }

// EventTypes returns a zero value of every payload, for registration.
func EventTypes() []any { return []any{Seeded{}, VersionAdded{}} }

// State is the catalog aggregate folded from its events. The zero value is
// an empty catalog that was never seeded.
type State struct {
	Catalog Catalog
	Seeded  bool
}

// Apply folds one event into the state; unknown events are ignored.
func (s *State) Apply(event any) {
	switch e := event.(type) {
	case *Seeded:
		s.Apply(*e)
	case *VersionAdded:
		s.Apply(*e)
	case Seeded:
		s.Seeded = true
		for _, v := range e.Versions {
			if pv, err := ParseVersion(v); err == nil {
				s.Catalog = s.Catalog.With(pv)
			}
		}
	case VersionAdded:
		if pv, err := ParseVersion(e.Version); err == nil {
			s.Catalog = s.Catalog.With(pv)
		}
	}
}

// Seed decides the initial versions. A catalog that already holds versions
// is left alone (nothing is emitted): the seed applies on the first start
// only, and later changes go through AddVersion.
func (s *State) Seed(versions []string) ([]any, error) {
	if s.Seeded || len(s.Catalog.versions) > 0 {
		return nil, nil
	}
	if len(versions) == 0 {
		return nil, errs.Invalid("versions", "the catalog needs at least one Kubernetes version")
	}
	c, err := New(versions...)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(versions))
	for _, v := range c.Versions() {
		out = append(out, v.String())
	}
	return []any{Seeded{Versions: out}}, nil
}

// AddVersion adds one supported version.
type AddVersion struct {
	Version string `json:"version"`
}

// AddVersion decides the addition of a version. A version already listed
// is a conflict, so that an administrator learns that nothing happened.
func (s *State) AddVersion(cmd AddVersion) ([]any, error) {
	v, err := ParseVersion(cmd.Version)
	if err != nil {
		return nil, errs.Invalid("version", "%v", err)
	}
	if s.Catalog.Has(v) {
		return nil, errs.Conflict("Kubernetes %s is already in the catalog", v)
	}
	return []any{VersionAdded{Version: v.String()}}, nil
}
