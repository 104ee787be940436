package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/natsserver"
)

// stores runs a test against both Store implementations, so the memory
// store keeps the JetStream store's semantics.
func stores(t *testing.T, fn func(t *testing.T, s events.Store)) {
	t.Run("jetstream", func(t *testing.T) { fn(t, eventstest.Start(t, testRegistry()).Store) })
	t.Run("memory", func(t *testing.T) { fn(t, events.NewMemoryStore(testRegistry())) })
}

func TestConcurrentAppendsOneWinner(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		ctx := context.Background()
		ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
		first, err := s.Append(ctx, ref, 0, events.New(counted{N: 0})...)
		if err != nil {
			t.Fatal(err)
		}
		version := events.Version(first)

		const writers = 50
		var wg sync.WaitGroup
		results := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Append(ctx, ref, version, events.New(counted{N: i + 1})...)
				results <- err
			}()
		}
		wg.Wait()
		close(results)
		wins, conflicts := 0, 0
		for err := range results {
			var c *events.ConflictError
			switch {
			case err == nil:
				wins++
			case errors.As(err, &c):
				conflicts++
				if c.Expected != version || c.Actual <= version {
					t.Errorf("conflict names expected %d actual %d; want expected %d and a newer actual", c.Expected, c.Actual, version)
				}
				if !errors.Is(err, &errs.Error{Kind: errs.KindConflict}) {
					t.Errorf("conflict does not match errs conflict kind")
				}
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}
		if wins != 1 || conflicts != writers-1 {
			t.Fatalf("wins=%d conflicts=%d, want 1 and %d", wins, conflicts, writers-1)
		}
		all, err := s.Load(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 {
			t.Fatalf("aggregate has %d events, want 2", len(all))
		}
	})
}

func TestMustNotExistYet(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		ctx := context.Background()
		ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
		if _, err := s.Append(ctx, ref, 0, events.New(counted{})...); err != nil {
			t.Fatal(err)
		}
		_, err := s.Append(ctx, ref, 0, events.New(counted{})...)
		var c *events.ConflictError
		if !errors.As(err, &c) || c.Expected != 0 || c.Actual == 0 {
			t.Fatalf("second create: got %v, want a conflict naming the actual version", err)
		}
	})
}

func TestRetriedAppendStoredOnce(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		ctx := context.Background()
		ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
		draft := events.Draft{ID: "0190a4a0-0000-7000-8000-000000000001", Payload: counted{N: 7}}
		a, err := s.Append(ctx, ref, 0, draft)
		if err != nil {
			t.Fatal(err)
		}
		// The retry carries the same expectation as the original attempt,
		// as a client does whose first publish timed out after it landed.
		b, err := s.Append(ctx, ref, 0, draft)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if a[0].Sequence != b[0].Sequence {
			t.Fatalf("retry stored at %d, original at %d", b[0].Sequence, a[0].Sequence)
		}
		all, _ := s.Load(ctx, ref)
		if len(all) != 1 {
			t.Fatalf("stored %d times, want once", len(all))
		}
	})
}

func TestAppendValidatesRef(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		_, err := s.Append(context.Background(), events.AggregateRef{Org: "acme.evil", Type: "machine", ID: "*"}, 0, events.New(counted{})...)
		e := errs.As(err)
		if e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 2 {
			t.Fatalf("got %v, want validation errors on org and aggregate_id", err)
		}
	})
}

func TestReplayRanges(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		ctx := context.Background()
		var seqs []uint64
		var marks []time.Time
		for batch := range 3 {
			marks = append(marks, time.Now())
			time.Sleep(20 * time.Millisecond)
			for i := range 10 {
				org := "acme"
				if i%2 == 1 {
					org = "globex"
				}
				ref := events.AggregateRef{Org: org, Type: "machine", ID: fmt.Sprintf("m%d", i)}
				var p events.Payload = counted{N: batch*10 + i}
				if i%3 == 0 {
					p = renamed{Name: fmt.Sprint(batch*10 + i)}
				}
				envs, err := s.Append(ctx, ref, events.Any, events.New(p)...)
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, envs[0].Sequence)
			}
			time.Sleep(20 * time.Millisecond)
		}
		marks = append(marks, time.Now())

		collect := func(f events.Filter, from, to events.Position) []uint64 {
			var got []uint64
			if err := s.Replay(ctx, f, from, to, func(e *events.Envelope) error {
				got = append(got, e.Sequence)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := func(keep func(i int) bool) []uint64 {
			var w []uint64
			for i, q := range seqs {
				if keep(i) {
					w = append(w, q)
				}
			}
			return w
		}
		cases := []struct {
			name     string
			f        events.Filter
			from, to events.Position
			keep     func(i int) bool
		}{
			{"all", events.Filter{}, events.Position{}, events.Position{}, func(int) bool { return true }},
			{"seq range", events.Filter{}, events.AtSeq(seqs[5]), events.AtSeq(seqs[17]), func(i int) bool { return i >= 5 && i <= 17 }},
			{"seq range org", events.Filter{Org: "globex"}, events.AtSeq(seqs[5]), events.AtSeq(seqs[17]), func(i int) bool { return i >= 5 && i <= 17 && i%2 == 1 }},
			{"time range middle batch", events.Filter{}, events.AtTime(marks[1]), events.AtTime(marks[2]), func(i int) bool { return i >= 10 && i < 20 }},
			{"time from", events.Filter{}, events.AtTime(marks[2]), events.Position{}, func(i int) bool { return i >= 20 }},
			{"event type", events.Filter{EventTypes: []string{"test.renamed"}}, events.Position{}, events.Position{}, func(i int) bool { return i%10%3 == 0 }},
			{"aggregate", events.Filter{Org: "acme", AggregateType: "machine", AggregateID: "m4"}, events.Position{}, events.Position{}, func(i int) bool { return i%10 == 4 }},
			{"nothing", events.Filter{Org: "initech"}, events.Position{}, events.Position{}, func(int) bool { return false }},
		}
		for _, c := range cases {
			got, w := collect(c.f, c.from, c.to), want(c.keep)
			if fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("%s: got %v, want %v", c.name, got, w)
			}
		}
		head, err := s.Head(ctx)
		if err != nil || head != seqs[len(seqs)-1] {
			t.Errorf("head = %d, %v; want %d", head, err, seqs[len(seqs)-1])
		}
	})
}

func TestEnvelopeCarriesContext(t *testing.T) {
	stores(t, func(t *testing.T, s events.Store) {
		ctx := events.WithActor(context.Background(), "token:t1 (ci)")
		ctx = events.WithCorrelation(ctx, "corr-1")
		ctx = events.WithCausation(ctx, "cause-1")
		envs, err := s.Append(ctx, events.AggregateRef{Org: "acme", Type: "pool", ID: "p"}, 0, events.New(renamed{Name: "x"})...)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s.Load(ctx, events.AggregateRef{Org: "acme", Type: "pool", ID: "p"})
		e := got[0]
		if e.Actor != "token:t1 (ci)" || e.CorrelationID != "corr-1" || e.CausationID != "cause-1" ||
			e.Type != "test.renamed" || e.SchemaVersion != 1 || e.ID != envs[0].ID || e.Time.IsZero() {
			t.Fatalf("envelope lost context: %+v", e)
		}
		p, err := testRegistry().Decode(&e)
		if err != nil || p.(renamed).Name != "x" {
			t.Fatalf("decode: %v %v", p, err)
		}
	})
}

func TestIncompatibleStreamIsReportedNotChanged(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cfg := events.StreamConfig(events.StreamOptions{})
	cfg.DenyPurge = false
	cfg.Discard = jetstream.DiscardOld
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, err = events.NewJetStreamStore(ctx, js, testRegistry(), events.StreamOptions{})
	if err == nil {
		t.Fatal("an incompatible stream was accepted")
	}
	for _, want := range []string{"deny_purge", "discard"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	st, _ := js.Stream(ctx, events.StreamName)
	if st.CachedInfo().Config.DenyPurge {
		t.Fatal("the stream was changed")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
