package projection

import (
	"context"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// TestDenseFiltersAreAppliedByTheClient: a filter that selects most of the
// log reads it all and skips the rest itself (the server's per-message
// matching is the slower way); one that selects little leaves it to the
// server. Either way the model sees only what the filter selects.
func TestDenseFiltersAreAppliedByTheClient(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	fill(t, env.Store, 10, 10) // machine events
	var lastOrg uint64
	for i := range 5 {
		envs, err := env.Store.Append(ctx, events.AggregateRef{Org: "acme", Type: "org", ID: "acme"}, events.Any, events.New(added{N: i})...)
		if err != nil {
			t.Fatal(err)
		}
		lastOrg = envs[0].Sequence
	}
	lastMachine := fill(t, env.Store, 10, 1) // and after them

	for _, c := range []struct {
		aggregate string
		last      uint64
		onClient  bool
		keys      int
	}{{"machine", lastMachine, true, 10}, {"org", lastOrg, false, 1}} {
		model := newSums()
		r := NewRunner(Config{Name: "only-" + c.aggregate, Filter: events.Filter{AggregateType: c.aggregate}}, env.JS, registry(), model, nil, nil)
		stop := runUntil(t, r, c.last)
		stop()
		if r.filterOnClient != c.onClient {
			t.Errorf("%s: filtered on the client %v, want %v", c.aggregate, r.filterOnClient, c.onClient)
		}
		if len(model.sum) != c.keys {
			t.Errorf("%s: the model holds %d aggregates, want %d", c.aggregate, len(model.sum), c.keys)
		}
		for key := range model.sum {
			if !strings.Contains(key, "/"+c.aggregate+"/") {
				t.Errorf("%s: the model holds %s", c.aggregate, key)
			}
		}
	}
}
