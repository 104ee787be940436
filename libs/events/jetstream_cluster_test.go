package events_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// The tests in this file run the JetStream store on a stream with three
// replicas in an in-process three-server cluster, and move the stream's
// leader while events are appended.

// opTimeout ends one append or load that gets no answer (while a leader
// is elected, requests may go unanswered), so that it is tried again.
const opTimeout = 2 * time.Second

// ack is an append the store acknowledged: the event's id and the
// sequence the store said it is stored at.
type ack struct {
	id  string
	seq uint64
	n   int
}

// TestClusterAppendsSurviveLeaderLoss has writers race to append to one
// aggregate with expected versions while the stream's leader is shut
// down, restarted and stepped down. Every append ends in success, a
// conflict (the writer reloads and tries again) or another error (the
// writer retries the same event at the same expected version, as a client
// does that does not know whether its append landed). In the end every
// acknowledged event is in the log exactly once, at the sequence its
// acknowledgement named, in order, and nothing else is.
func TestClusterAppendsSurviveLeaderLoss(t *testing.T) {
	testAppendsSurviveLeaderLoss(t, func(s *events.JetStreamStore) events.Store { return s })
}

// testAppendsSurviveLeaderLoss is TestClusterAppendsSurviveLeaderLoss with
// the appends made through the store that through makes of the cluster's.
func testAppendsSurviveLeaderLoss(t *testing.T, through func(*events.JetStreamStore) events.Store) {
	seed := eventstest.Seed(t, uint64(time.Now().UnixNano()))
	rng := rand.New(rand.NewPCG(seed, 0))
	c := eventstest.StartCluster(t)
	clusterStore, _ := c.Store(t, testRegistry(), events.StreamOptions{})
	store := through(clusterStore)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}

	const writers, perWriter = 3, 6
	total := writers * perWriter
	// When the leader changes, by the number of events acknowledged so far.
	stopAt := 2 + rng.IntN(total/3)
	stepDownAt := total/2 + rng.IntN(total/4)
	t.Logf("leader stopped after %d acknowledged events, restarted and stepped down after %d", stopAt, stepDownAt)

	var (
		mu        sync.Mutex
		acks      []ack
		acked     atomic.Int64
		conflicts atomic.Int64
		transient atomic.Int64
		wg        sync.WaitGroup
		failures  = make(chan string, writers)
	)
	for w := range writers {
		wg.Go(func() {
			for e := range perWriter {
				draft := events.Draft{ID: fmt.Sprintf("w%d-e%02d", w, e), Payload: counted{N: w*100 + e}}
				seq, err := appendUntilStored(ctx, store, ref, draft, &conflicts, &transient)
				if err != nil {
					failures <- fmt.Sprintf("%s: %v", draft.ID, err)
					return
				}
				mu.Lock()
				acks = append(acks, ack{id: draft.ID, seq: seq, n: w*100 + e})
				mu.Unlock()
				acked.Add(1)
			}
		})
	}

	waitAcked := func(n int) {
		eventstest.Eventually(t, fmt.Sprintf("%d events acknowledged", n), 30*time.Second, 5*time.Millisecond, func() (bool, string) {
			return acked.Load() >= int64(n) || len(failures) > 0, fmt.Sprint(acked.Load())
		})
	}
	waitAcked(stopAt)
	stopped, leader := c.StopStreamLeader(events.StreamName)
	t.Logf("stream leader %s shut down at %d acknowledged; %s leads", c.Name(stopped), acked.Load(), c.Name(leader))
	waitAcked(stepDownAt)
	c.Restart(stopped)
	old, leader := c.StepDownStreamLeader(events.StreamName)
	t.Logf("%s restarted, leader %s stepped down at %d acknowledged; %s leads", c.Name(stopped), c.Name(old), acked.Load(), c.Name(leader))
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	t.Logf("%d acknowledged, %d conflicts, %d other errors retried", len(acks), conflicts.Load(), transient.Load())
	if t.Failed() {
		t.FailNow()
	}
	checkStoredOnceInOrder(t, ctx, store, ref, acks)
}

// appendUntilStored appends draft to ref until the store acknowledges it.
// It fails if a conflict is reported for an event that is already stored:
// the store promises that a retried event is stored once and reported as
// appended.
func appendUntilStored(ctx context.Context, store events.Store, ref events.AggregateRef, draft events.Draft,
	conflicts, transient *atomic.Int64) (uint64, error) {
	version, err := loadVersion(ctx, store, ref)
	if err != nil {
		return 0, err
	}
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		envs, err := store.Append(actx, ref, version, draft)
		cancel()
		var conflict *events.ConflictError
		switch {
		case err == nil:
			if len(envs) != 1 || envs[0].ID != draft.ID || envs[0].Sequence == 0 {
				return 0, fmt.Errorf("append answered %+v", envs)
			}
			return envs[0].Sequence, nil
		case errors.As(err, &conflict):
			conflicts.Add(1)
			if !errors.Is(err, &errs.Error{Kind: errs.KindConflict}) || conflict.Expected != version {
				return 0, fmt.Errorf("conflict %v does not name the expected version %d", err, version)
			}
			all, err := loadAll(ctx, store, ref)
			if err != nil {
				return 0, err
			}
			// An earlier attempt of this event that is still under way
			// expected this version or an older one, which the conflict
			// says is gone: it cannot land any more. So if the event is
			// stored, it was when the conflict was answered.
			for _, e := range all {
				if e.ID == draft.ID {
					return 0, fmt.Errorf("append at version %d reported a conflict (%v), but the event is stored at %d",
						conflict.Expected, err, e.Sequence)
				}
			}
			version = events.Version(all)
		default:
			// Unavailable while a leader is elected, or a lost answer: the
			// event may or may not have landed, so the same event is sent
			// again with the same expectation.
			transient.Add(1)
			if e := errs.As(err); e != nil && e.Kind == errs.KindValidation {
				return 0, err
			}
		}
	}
	return 0, ctx.Err()
}

func loadVersion(ctx context.Context, store events.Store, ref events.AggregateRef) (uint64, error) {
	all, err := loadAll(ctx, store, ref)
	return events.Version(all), err
}

// loadAll loads ref, retrying while the cluster cannot answer.
func loadAll(ctx context.Context, store events.Store, ref events.AggregateRef) ([]events.Envelope, error) {
	for {
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		all, err := store.Load(lctx, ref)
		cancel()
		if err == nil || ctx.Err() != nil {
			return all, err
		}
	}
}

// checkStoredOnceInOrder checks that ref holds exactly the acknowledged
// events, each at the sequence its acknowledgement named, in sequence
// order, with its payload.
func checkStoredOnceInOrder(t *testing.T, ctx context.Context, store events.Store, ref events.AggregateRef, acks []ack) {
	t.Helper()
	all, err := loadAll(ctx, store, ref)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(acks, func(a, b ack) int { return cmp.Compare(a.seq, b.seq) })
	if len(all) != len(acks) {
		t.Errorf("the aggregate holds %d events; %d were acknowledged", len(all), len(acks))
	}
	reg := testRegistry()
	for i := range min(len(all), len(acks)) {
		got, want := all[i], acks[i]
		if got.ID != want.id || got.Sequence != want.seq {
			t.Errorf("event %d is %s at %d, want %s at %d (acknowledged)", i, got.ID, got.Sequence, want.id, want.seq)
			continue
		}
		p, err := reg.Decode(&got)
		if err != nil || p.(counted).N != want.n {
			t.Errorf("event %s holds %v (%v), want n=%d", got.ID, p, err, want.n)
		}
	}
}

// TestClusterRetriedAppendAfterLeaderChange is the append that landed but
// whose acknowledgement was lost: the client retries the same events with
// the same expected version after the leader changed, while another
// writer appended after them. The server deduplicates by message id while
// the stream's duplicate window lasts; after it, the retry fails the
// expected-version check and the store finds the events it already holds.
// Either way the retry is reported as appended, at the sequences where the
// first attempt stored them, and nothing is stored twice. A retry that
// also carries events that never landed stores those after the ones that
// did.
func TestClusterRetriedAppendAfterLeaderChange(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{
		{"deduplicated", 0}, // the 2-minute default outlasts the test
		{"after the duplicate window", 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) { testRetriedAppend(t, c.window) })
	}
}

func testRetriedAppend(t *testing.T, window time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := eventstest.StartCluster(t)
	store, js := cl.Store(t, testRegistry(), events.StreamOptions{Duplicates: window})
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	id := func(n int) string { return fmt.Sprintf("0190a4a0-0000-7000-8000-%012d", n) }

	first, err := store.Append(ctx, ref, 0, events.New(counted{N: 0})...)
	if err != nil {
		t.Fatal(err)
	}
	v0 := events.Version(first)
	lost := []events.Draft{{ID: id(1), Payload: counted{N: 1}}, {ID: id(2), Payload: counted{N: 2}}}
	landed, err := store.Append(ctx, ref, v0, lost...)
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt's answer is lost. Another writer goes on.
	other, err := store.Append(ctx, ref, events.Version(landed), events.Draft{ID: id(3), Payload: counted{N: 3}})
	if err != nil {
		t.Fatal(err)
	}
	probe := dedupeProbe{t, ctx, js, window}
	probe.mark("probe-1")
	stopped, leader := cl.StopStreamLeader(events.StreamName)
	t.Logf("stream leader %s shut down; %s leads", cl.Name(stopped), cl.Name(leader))
	probe.passed("probe-1")

	retried, err := store.Append(ctx, ref, v0, lost...)
	if err != nil {
		t.Fatalf("retry of the landed append: %v; want it reported as appended", err)
	}
	for i := range lost {
		if retried[i].ID != landed[i].ID || retried[i].Sequence != landed[i].Sequence {
			t.Errorf("retry answered %s at %d, the first attempt stored %s at %d",
				retried[i].ID, retried[i].Sequence, landed[i].ID, landed[i].Sequence)
		}
	}

	// A retry whose first event landed and whose second did not (the
	// first attempt failed between the two).
	partial := []events.Draft{{ID: id(4), Payload: counted{N: 4}}, {ID: id(5), Payload: counted{N: 5}}}
	half, err := store.Append(ctx, ref, events.Version(other), partial[0])
	if err != nil {
		t.Fatal(err)
	}
	probe.mark("probe-2")
	old, leader := cl.StepDownStreamLeader(events.StreamName)
	t.Logf("stream leader %s stepped down; %s leads", cl.Name(old), cl.Name(leader))
	probe.passed("probe-2")
	rest, err := store.Append(ctx, ref, events.Version(other), partial...)
	if err != nil {
		t.Fatalf("retry of a half-landed append: %v; want it completed", err)
	}
	if rest[0].Sequence != half[0].Sequence || rest[1].Sequence <= rest[0].Sequence {
		t.Errorf("retry stored %s at %d and %s at %d; the first attempt stored %s at %d",
			rest[0].ID, rest[0].Sequence, rest[1].ID, rest[1].Sequence, half[0].ID, half[0].Sequence)
	}

	var acks []ack
	for i, e := range slices.Concat(first, landed, other, rest) {
		acks = append(acks, ack{e.ID, e.Sequence, i})
	}
	checkStoredOnceInOrder(t, ctx, store, ref, acks)
}

// dedupeProbe tells whether the stream still deduplicates what was
// appended before a probe: mark publishes a probe with a fresh message id
// on a subject of its own right after an append; after the leader
// change, passed checks, with the default window, that the new leader
// still deduplicates the probe (and so the events before it), or with a
// short window waits until the window has passed for the probe (and so
// for those events).
type dedupeProbe struct {
	t      *testing.T
	ctx    context.Context
	js     jetstream.JetStream
	window time.Duration
}

func (p dedupeProbe) publish(msgID string) (*jetstream.PubAck, error) {
	return p.js.PublishMsg(p.ctx, &nats.Msg{Subject: "events.acme.probe.p1", Data: []byte("{}")}, jetstream.WithMsgID(msgID))
}

func (p dedupeProbe) mark(msgID string) {
	p.t.Helper()
	if _, err := p.publish(msgID); err != nil {
		p.t.Fatal(err)
	}
}

func (p dedupeProbe) passed(msgID string) {
	p.t.Helper()
	if p.window == 0 {
		a, err := p.publish(msgID)
		if err != nil || !a.Duplicate {
			p.t.Fatalf("probe %s published again: %+v %v; want it deduplicated by the new leader", msgID, a, err)
		}
		return
	}
	eventstest.Eventually(p.t, "the duplicate window to pass", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		a, err := p.publish(msgID)
		return err == nil && !a.Duplicate, fmt.Sprintf("%+v %v", a, err)
	})
}
