package catalog

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

func TestAggregate(t *testing.T) {
	var s State
	if _, err := s.Seed(nil); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("empty seed: %v", err)
	}
	if _, err := s.Seed([]string{"1.33.1", "nope"}); err == nil || errs.As(err).Fields[0].Field != "versions[1]" {
		t.Fatalf("bad seed: %v", err)
	}
	evs, err := s.Seed([]string{"1.33.4", "1.32.7", "1.33.1"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("seed: %v %v", evs, err)
	}
	if got := evs[0].(Seeded).Versions; len(got) != 3 || got[0] != "1.32.7" {
		t.Fatalf("seeded versions not sorted: %v", got)
	}
	for _, e := range evs {
		s.Apply(e)
	}
	if evs, err := s.Seed([]string{"1.34.1"}); err != nil || evs != nil {
		t.Fatalf("second seed must be a no-op: %v %v", evs, err)
	}
	if _, err := s.AddVersion(AddVersion{Version: "1.33"}); !errs.Is(err, errs.KindValidation) || errs.As(err).Fields[0].Field != "version" {
		t.Fatalf("bad version: %v", err)
	}
	if _, err := s.AddVersion(AddVersion{Version: "1.33.4"}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	evs, err = s.AddVersion(AddVersion{Version: "v1.33.5"})
	if err != nil || evs[0].(VersionAdded).Version != "1.33.5" {
		t.Fatalf("add: %v %v", evs, err)
	}
	s.Apply(&VersionAdded{Version: "1.33.5"})
	if v, _ := s.Catalog.Latest(Minor{Major: 1, Minor: 33}); v.String() != "1.33.5" {
		t.Fatalf("latest = %v", v)
	}
	s.Apply(struct{}{}) // unknown events are ignored
}
