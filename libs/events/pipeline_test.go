package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// TestAppendManyOrdersEachAggregate appends to more aggregates than
// AppendMany has writers, three appends each (the first of two events),
// and checks that every aggregate holds its events in batch order, at the
// sequences the results name.
func TestAppendManyOrdersEachAggregate(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx := context.Background()
	const aggregates, perAggregate = 300, 3
	var batch []events.AppendRequest
	for round := range perAggregate {
		for a := range aggregates {
			req := events.AppendRequest{Ref: machine(fmt.Sprintf("m%03d", a)), Expected: events.Any,
				Drafts: events.New(counted{N: round * 10})}
			if round == 0 {
				req.Expected, req.Drafts = 0, events.New(counted{N: 0}, counted{N: 1})
			}
			batch = append(batch, req)
		}
	}
	results := env.Store.AppendMany(ctx, batch)
	if len(results) != len(batch) {
		t.Fatalf("%d results for %d requests", len(results), len(batch))
	}
	want := map[events.AggregateRef][]events.Envelope{}
	for i, r := range results {
		if r.Err != nil || len(r.Events) != len(batch[i].Drafts) {
			t.Fatalf("request %d: %d events, %v", i, len(r.Events), r.Err)
		}
		want[batch[i].Ref] = append(want[batch[i].Ref], r.Events...)
	}
	for ref, stored := range want {
		got, err := env.Store.Load(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(stored) {
			t.Fatalf("%s holds %d events, the results name %d", ref, len(got), len(stored))
		}
		for i := range got {
			if got[i].ID != stored[i].ID || got[i].Sequence != stored[i].Sequence {
				t.Fatalf("%s event %d is %s at %d; the results name %s at %d", ref, i,
					got[i].ID, got[i].Sequence, stored[i].ID, stored[i].Sequence)
			}
		}
	}
}

// TestAppendManyAnswersAsAppend puts in one batch what Append answers in
// each of its ways: success, a lost race (also to a later append of the
// same aggregate in the batch, which runs after the earlier one), a retry
// of an append that landed before and one that landed earlier in the
// batch (both answered as appended, stored once), and refused requests;
// the other requests are not held up by the failures.
func TestAppendManyAnswersAsAppend(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx := context.Background()
	a, b, c, d := machine("a"), machine("b"), machine("c"), machine("d")
	first, err := env.Store.Append(ctx, a, 0, events.New(counted{N: 1})...)
	if err != nil {
		t.Fatal(err)
	}
	landed := events.Draft{ID: "0190a4a0-0000-7000-8000-0000000000b1", Payload: counted{N: 2}}
	before, err := env.Store.Append(ctx, b, 0, landed)
	if err != nil {
		t.Fatal(err)
	}
	twice := events.Draft{ID: "0190a4a0-0000-7000-8000-0000000000d1", Payload: counted{N: 3}}
	va := events.Version(first)
	batch := []events.AppendRequest{
		0: {Ref: a, Expected: va, Drafts: events.New(counted{N: 4})},
		1: {Ref: a, Expected: va, Drafts: events.New(counted{N: 5})}, // the version request 0 moved on from
		2: {Ref: b, Expected: 0, Drafts: []events.Draft{landed}},
		3: {Ref: c, Expected: 5, Drafts: events.New(counted{N: 6})}, // c does not exist
		4: {Ref: d, Expected: 0, Drafts: []events.Draft{twice}},
		5: {Ref: d, Expected: 0, Drafts: []events.Draft{twice}},
		6: {Ref: events.AggregateRef{Org: "acme", Type: "machine", ID: "x.y"}, Expected: 0, Drafts: events.New(counted{})},
		7: {Ref: machine("e"), Expected: 0},
	}
	res := env.Store.AppendMany(ctx, batch)

	for _, i := range []int{0, 2, 4, 5} {
		if res[i].Err != nil || len(res[i].Events) != 1 {
			t.Fatalf("request %d: %v, %d events; want it appended", i, res[i].Err, len(res[i].Events))
		}
	}
	conflict := func(i int, expected, actual uint64) {
		t.Helper()
		var ce *events.ConflictError
		if !errors.As(res[i].Err, &ce) || !errors.Is(res[i].Err, &errs.Error{Kind: errs.KindConflict}) {
			t.Fatalf("request %d: %v; want a conflict", i, res[i].Err)
		}
		if ce.Expected != expected || ce.Actual != actual || len(res[i].Events) != 0 {
			t.Errorf("request %d: conflict at %d (actual %d) with %d events; want at %d (actual %d), none",
				i, ce.Expected, ce.Actual, len(res[i].Events), expected, actual)
		}
	}
	conflict(1, va, res[0].Events[0].Sequence)
	conflict(3, 5, 0)
	if got := res[2].Events[0]; got.ID != landed.ID || got.Sequence != before[0].Sequence {
		t.Errorf("retry answered %s at %d; it landed at %d", got.ID, got.Sequence, before[0].Sequence)
	}
	if res[5].Events[0].Sequence != res[4].Events[0].Sequence {
		t.Errorf("the same event appended twice in a batch answered %d and %d", res[4].Events[0].Sequence, res[5].Events[0].Sequence)
	}
	for _, i := range []int{6, 7} {
		if e := errs.As(res[i].Err); e == nil || e.Kind != errs.KindValidation {
			t.Errorf("request %d: %v; want a validation error", i, res[i].Err)
		}
	}
	for ref, n := range map[events.AggregateRef]int{a: 2, b: 1, c: 0, d: 1} {
		if all, err := env.Store.Load(ctx, ref); err != nil || len(all) != n {
			t.Errorf("%s holds %d events (%v), want %d", ref, len(all), err, n)
		}
	}
}

// TestAppendManyRacesOneWinner runs two batches on the same aggregates at
// the same version at once: on each aggregate exactly one of them wins
// and the other reports the conflict.
func TestAppendManyRacesOneWinner(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx := context.Background()
	const aggregates = 40
	batch := make([]events.AppendRequest, aggregates)
	for i := range batch {
		batch[i] = events.AppendRequest{Ref: machine(fmt.Sprintf("m%02d", i)), Expected: 0, Drafts: events.New(counted{N: i})}
	}
	var results [2][]events.AppendResult
	var wg sync.WaitGroup
	for w := range results {
		wg.Go(func() { results[w] = env.Store.AppendMany(ctx, batch) })
	}
	wg.Wait()
	for i := range batch {
		var wins, conflicts int
		for w := range results {
			var ce *events.ConflictError
			switch err := results[w][i].Err; {
			case err == nil:
				wins++
			case errors.As(err, &ce):
				conflicts++
			default:
				t.Errorf("%s: %v", batch[i].Ref, err)
			}
		}
		if wins != 1 || conflicts != 1 {
			t.Errorf("%s: %d wins and %d conflicts, want one each", batch[i].Ref, wins, conflicts)
		}
	}
}

// TestAppendManyCancelled: a batch under a done context publishes
// nothing, and its requests fail with errors that are not conflicts, as
// Append's do.
func TestAppendManyCancelled(t *testing.T) {
	env := eventstest.Start(t, testRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := env.Store.AppendMany(ctx, []events.AppendRequest{
		{Ref: machine("a"), Expected: 0, Drafts: events.New(counted{})},
		{Ref: machine("b"), Expected: 0, Drafts: events.New(counted{})},
	})
	for i, r := range res {
		if !errors.Is(r.Err, context.Canceled) || errs.Is(r.Err, errs.KindConflict) {
			t.Errorf("request %d: %v; want the cancellation", i, r.Err)
		}
	}
	if head, err := env.Store.Head(context.Background()); err != nil || head != 0 {
		t.Errorf("the log is at %d (%v), want empty", head, err)
	}
}

// TestAppendManyCancelledMidway cancels a batch from within: the payload
// of a request that begins after the first publishes are in flight
// cancels the context as it is encoded. Every request then either is
// appended or fails with the cancellation (not a conflict: its event may
// have landed), and a retry of the failed ones with the same events
// stores each event once.
func TestAppendManyCancelledMidway(t *testing.T) {
	reg := testRegistry()
	reg.Register(cancelOnEncode{})
	env := eventstest.Start(t, reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const aggregates = 600
	batch := make([]events.AppendRequest, aggregates)
	for i := range batch {
		var p events.Payload = counted{N: i}
		if i == aggregates/2 {
			p = cancelOnEncode{cancel: cancel}
		}
		batch[i] = events.AppendRequest{Ref: machine(fmt.Sprintf("m%03d", i)), Expected: 0,
			Drafts: []events.Draft{{ID: fmt.Sprintf("0190a4a0-0000-7000-8000-000000000%03d", i), Payload: p}}}
	}
	var retry []events.AppendRequest
	for i, r := range env.Store.AppendMany(ctx, batch) {
		switch {
		case r.Err == nil:
		case !errors.Is(r.Err, context.Canceled) || errs.Is(r.Err, errs.KindConflict):
			t.Fatalf("request %d: %v; want it appended or cancelled", i, r.Err)
		default:
			retry = append(retry, batch[i])
		}
	}
	if len(retry) == 0 {
		t.Fatal("no request was cancelled")
	}
	for i, r := range env.Store.AppendMany(context.Background(), retry) {
		if r.Err != nil {
			t.Fatalf("retry of %s: %v", retry[i].Ref, r.Err)
		}
	}
	for _, req := range batch {
		all, err := env.Store.Load(context.Background(), req.Ref)
		if err != nil || len(all) != 1 || all[0].ID != req.Drafts[0].ID {
			t.Fatalf("%s holds %d events (%v), want its event once", req.Ref, len(all), err)
		}
	}
	t.Logf("%d of %d requests cancelled and retried", len(retry), aggregates)
}

// cancelOnEncode is a payload that cancels a context when it is encoded.
type cancelOnEncode struct{ cancel context.CancelFunc }

func (cancelOnEncode) EventType() string { return "test.cancel_on_encode" }

func (c cancelOnEncode) MarshalJSON() ([]byte, error) {
	if c.cancel != nil {
		c.cancel()
	}
	return []byte("{}"), nil
}

// TestClusterAppendManySurvivesLeaderLoss is
// TestClusterAppendsSurviveLeaderLoss with every append made through
// AppendMany: asynchronous publishes whose answers are lost or time out
// while the leader changes.
func TestClusterAppendManySurvivesLeaderLoss(t *testing.T) {
	testAppendsSurviveLeaderLoss(t, func(s *events.JetStreamStore) events.Store { return batchesOfOne{s} })
}

// batchesOfOne is a Store that appends through AppendMany.
type batchesOfOne struct{ *events.JetStreamStore }

func (s batchesOfOne) Append(ctx context.Context, ref events.AggregateRef, expected uint64, drafts ...events.Draft) ([]events.Envelope, error) {
	r := s.AppendMany(ctx, []events.AppendRequest{{Ref: ref, Expected: expected, Drafts: drafts}})[0]
	return r.Events, r.Err
}

func machine(id string) events.AggregateRef {
	return events.AggregateRef{Org: "acme", Type: "machine", ID: id}
}
