package app

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Every request check names each field it refuses, and only those.
func TestRequestChecks(t *testing.T) {
	const uuid = "4c4c4544-0042-3510-8052-b4c04f4e4d32"
	long := strings.Repeat("r", MaxReasonLen+1)
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"ref ok", CheckRef("acme", "r-1_a"), nil},
		{"ref bad org and id", CheckRef("Acme", "r 1"), []string{"org", "id"}},
		{"ref empty id", CheckRef("acme", ""), []string{"id"}},
		{"org ok", CheckOrg("acme"), nil},
		{"org platform", CheckOrg("_platform"), []string{"org"}},
		{"control ok", CheckControl("acme", "r1", "maintenance window"), nil},
		{"control long reason", CheckControl("acme", "r1", long), []string{"reason"}},
		{"start ok", CheckStart("acme", uuid, "r0", "r1"), nil},
		{"start minimal", CheckStart("acme", "", "", ""), nil},
		{"start bad machine, after, id", CheckStart("acme", strings.ToUpper(uuid), "a b", "x/y"), []string{"machine", "after", "id"}},
		{"log ok", CheckLogPage("acme", "r1", 0, 100, time.Second, 20*time.Second), nil},
		{"log bad page", CheckLogPage("acme", "r1", -1, 1001, 21*time.Second, 20*time.Second), []string{"after", "limit", "wait"}},
	} {
		if got := errs.FieldNames(c.err); !slices.Equal(got, c.want) {
			t.Errorf("%s: refused %v (%v), want %v", c.name, got, c.err, c.want)
		}
	}
}
