package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// chainBreaks reads anvil_events_append_chain_breaks_total.
func chainBreaks(t *testing.T) float64 {
	t.Helper()
	return counterValue(t, "anvil_events_append_chain_breaks_total")
}

// counterValue reads a counter of the default registry, summed over its
// labels; a counter that is not registered fails the test.
func counterValue(t *testing.T, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

// A retried append of three events whose first landed, after which a
// message of another aggregate landed: the retry's chain breaks at its
// second event (the stream's last message is not the first event), and
// the rest is sent again, chained from there, landing after the other
// aggregate's message, in order, once each.
func TestChainedAppendResumesWhereItsChainBroke(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx := context.Background()
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	other := events.AggregateRef{Org: "acme", Type: "machine", ID: "m2"}
	id := func(n int) string { return fmt.Sprintf("0190a4a0-0000-7000-8000-%012d", n) }
	drafts := []events.Draft{{ID: id(1), Payload: counted{N: 1}}, {ID: id(2), Payload: counted{N: 2}}, {ID: id(3), Payload: counted{N: 3}}}

	half, err := env.Store.Append(ctx, ref, 0, drafts[0])
	if err != nil {
		t.Fatal(err)
	}
	between, err := env.Store.Append(ctx, other, 0, events.New(counted{N: 9})...)
	if err != nil {
		t.Fatal(err)
	}
	before := chainBreaks(t)
	got, err := env.Store.Append(ctx, ref, 0, drafts...)
	if err != nil {
		t.Fatalf("retry of a half-landed append: %v; want it completed", err)
	}
	if breaks := chainBreaks(t) - before; breaks != 1 {
		t.Errorf("chain breaks: %v; want 1 (the second event expected the first as the stream's last message)", breaks)
	}
	if got[0].Sequence != half[0].Sequence {
		t.Errorf("first event answered at %d; the first attempt stored it at %d", got[0].Sequence, half[0].Sequence)
	}
	if got[1].Sequence <= between[0].Sequence || got[2].Sequence != got[1].Sequence+1 {
		t.Errorf("rest stored at %d and %d; want after the other aggregate's event (%d), next to each other",
			got[1].Sequence, got[2].Sequence, between[0].Sequence)
	}
	loaded, err := env.Store.Load(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 3 {
		t.Fatalf("aggregate holds %d events; want 3", len(loaded))
	}
	for i := range loaded {
		if loaded[i].ID != drafts[i].ID || loaded[i].Sequence != got[i].Sequence {
			t.Errorf("event %d: log holds %s at %d; append answered %s at %d", i, loaded[i].ID, loaded[i].Sequence, got[i].ID, got[i].Sequence)
		}
	}
}

// Writers append chains of events to their own aggregates at the same
// time, so that chains break on each other's messages: every append
// succeeds, and each aggregate's log is exactly its appends' events in
// order, with the sequences the appends answered.
func TestChainedAppendsOfConcurrentWriters(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx := context.Background()
	const writers, appends, perAppend = 4, 40, 16
	answered := make([][]events.Envelope, writers)
	errc := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := events.AggregateRef{Org: "acme", Type: "machine", ID: fmt.Sprintf("w%d", w)}
			var version uint64
			for a := range appends {
				drafts := make([]events.Draft, perAppend)
				for i := range drafts {
					drafts[i] = events.Draft{Payload: counted{N: a*perAppend + i}}
				}
				envs, err := env.Store.Append(ctx, ref, version, drafts...)
				if err != nil {
					errc <- fmt.Errorf("writer %d, append %d: %w", w, a, err)
					return
				}
				answered[w] = append(answered[w], envs...)
				version = events.Version(envs)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for w := range writers {
		loaded, err := env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: fmt.Sprintf("w%d", w)})
		if err != nil {
			t.Fatal(err)
		}
		if len(loaded) != len(answered[w]) {
			t.Fatalf("writer %d: log holds %d events; appends answered %d", w, len(loaded), len(answered[w]))
		}
		for i := range loaded {
			if loaded[i].ID != answered[w][i].ID || loaded[i].Sequence != answered[w][i].Sequence {
				t.Fatalf("writer %d, event %d: log holds %s at %d; append answered %s at %d",
					w, i, loaded[i].ID, loaded[i].Sequence, answered[w][i].ID, answered[w][i].Sequence)
			}
		}
	}
	t.Logf("chain breaks so far in this process: %v", chainBreaks(t))
}
