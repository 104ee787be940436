package projection

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/poison"
)

type added struct {
	N int `json:"n"`
}

func (added) EventType() string { return "test.added" }

type labelled struct {
	Label string `json:"label"`
}

func (labelled) EventType() string { return "test.labelled" }

func registry() *events.Registry {
	r := events.NewRegistry()
	r.RegisterAll([]any{added{}, labelled{}})
	return r
}

// sums is a read model: per aggregate, a running sum and its labels. The
// sum makes a double application visible in the hash.
type sums struct {
	mu         sync.Mutex
	checkpoint uint64
	sum        map[string]int
	labels     map[string][]string
	onApply    func(seq uint64)
}

func newSums() *sums { return &sums{sum: map[string]int{}, labels: map[string][]string{}} }

func (s *sums) Apply(env *events.Envelope, payload any) error {
	s.mu.Lock()
	key := env.Ref().String()
	switch p := payload.(type) {
	case added:
		s.sum[key] += p.N
	case labelled:
		if p.Label == "" {
			s.mu.Unlock()
			return fmt.Errorf("label must not be empty")
		}
		s.labels[key] = append(s.labels[key], p.Label)
	}
	s.checkpoint = env.Sequence
	hook := s.onApply
	s.mu.Unlock()
	if hook != nil {
		hook(env.Sequence)
	}
	return nil
}

func (s *sums) Skip(seq uint64) {
	s.mu.Lock()
	s.checkpoint = seq
	s.mu.Unlock()
}

func (s *sums) Checkpoint() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpoint
}

func (s *sums) Reset() {
	s.mu.Lock()
	s.checkpoint, s.sum, s.labels = 0, map[string]int{}, map[string][]string{}
	s.mu.Unlock()
}

func (s *sums) hash() [32]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.sum)+len(s.labels))
	for k := range s.sum {
		keys = append(keys, "s"+k)
	}
	for k := range s.labels {
		keys = append(keys, "l"+k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		if k[0] == 's' {
			fmt.Fprintf(h, "%s=%d\n", k, s.sum[k[1:]])
		} else {
			fmt.Fprintf(h, "%s=%s\n", k, strings.Join(s.labels[k[1:]], ","))
		}
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func fill(t testing.TB, s events.Store, aggregates, perAggregate int) uint64 {
	t.Helper()
	ctx := context.Background()
	var last uint64
	for i := range perAggregate {
		for a := range aggregates {
			var p events.Payload = added{N: a*1000 + i}
			if i%5 == 4 {
				p = labelled{Label: fmt.Sprintf("l%d", i)}
			}
			envs, err := s.Append(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: fmt.Sprintf("m%d", a)}, events.Any, events.New(p)...)
			if err != nil {
				t.Fatal(err)
			}
			last = envs[0].Sequence
		}
	}
	return last
}

func runUntil(t *testing.T, r *Runner, seq uint64) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	if err := r.WaitFor(wctx, seq); err != nil {
		cancel()
		t.Fatalf("projection did not reach %d (at %d): %v", seq, r.model.Checkpoint(), err)
	}
	return func() { cancel(); <-done }
}

func TestDuplicatesAndRedeliveryKeepTheSameState(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 20, 25)

	clean := newSums()
	stop := runUntil(t, NewRunner(Config{Name: "clean"}, env.JS, registry(), clean, nil, nil), last)
	stop()

	// Read the real messages, then hand each to the runner several times
	// and out of order, as redelivery after lost acks would.
	ctx := context.Background()
	stream, _ := env.JS.Stream(ctx, events.StreamName)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for range int(last) {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	noisy := newSums()
	r := NewRunner(Config{Name: "noisy"}, env.JS, registry(), noisy, nil, nil)
	rng := rand.New(rand.NewPCG(eventstest.Seed(t, 1), 2))
	for i := 0; i < len(msgs); {
		// deliver a window forward, then redeliver part of it again
		end := min(i+1+rng.IntN(20), len(msgs))
		for _, m := range msgs[i:end] {
			meta, _ := m.Metadata()
			r.handle(ctx, m, meta)
		}
		back := max(0, i-rng.IntN(30))
		for _, m := range msgs[back:end] {
			meta, _ := m.Metadata()
			r.handle(ctx, m, meta)
		}
		i = end
	}
	if noisy.Checkpoint() != last {
		t.Fatalf("checkpoint %d, want %d", noisy.Checkpoint(), last)
	}
	if noisy.hash() != clean.hash() {
		t.Fatal("duplicates and redeliveries changed the read model")
	}
}

func TestStoppedMidStreamResumesFromCheckpoint(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 10, 30)

	clean := newSums()
	stop := runUntil(t, NewRunner(Config{Name: "clean"}, env.JS, registry(), clean, nil, nil), last)
	stop()

	model := newSums()
	ctx, cancel := context.WithCancel(context.Background())
	model.onApply = func(seq uint64) {
		if seq == last/3 {
			cancel() // stop mid-stream, mid-batch
		}
	}
	r := NewRunner(Config{Name: "resumable", AckEvery: 7}, env.JS, registry(), model, nil, nil)
	if err := r.Run(ctx); err != context.Canceled {
		t.Fatalf("run: %v", err)
	}
	stoppedAt := model.Checkpoint()
	if stoppedAt < last/3 || stoppedAt >= last {
		t.Fatalf("stopped at %d; the test wants a stop mid-stream near %d", stoppedAt, last/3)
	}
	model.onApply = nil

	// More events arrive while it is down.
	last = fill(t, env.Store, 10, 2)
	stop = runUntil(t, NewRunner(Config{Name: "clean"}, env.JS, registry(), clean, nil, nil), last)
	stop()

	stop = runUntil(t, NewRunner(Config{Name: "resumable", AckEvery: 7}, env.JS, registry(), model, nil, nil), last)
	stop()
	if model.hash() != clean.hash() {
		t.Fatal("resumed projection differs from an uninterrupted one")
	}
}

func TestBadEventsArePoisonedAndDoNotStopTheProjection(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	if err := poison.EnsureStream(ctx, env.JS, 1); err != nil {
		t.Fatal(err)
	}
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	if _, err := env.Store.Append(ctx, ref, events.Any, events.New(added{N: 1})...); err != nil {
		t.Fatal(err)
	}
	// Three bad messages: not JSON, an unknown type, a payload of the wrong shape.
	good := events.Envelope{ID: "x", Type: "test.added", SchemaVersion: 1, Org: "acme", AggregateType: "machine", AggregateID: "m1", Time: time.Now()}
	unknown, wrongShape := good, good
	unknown.ID, unknown.Type, unknown.Payload = "x1", "test.unheard_of", []byte(`{}`)
	wrongShape.ID, wrongShape.Payload = "x2", []byte(`{"n":"seven"}`)
	bad := []*nats.Msg{
		{Subject: ref.Subject(), Data: []byte(`not an event at all`)},
		events.EncodeMsg(&unknown),
		events.EncodeMsg(&wrongShape),
	}
	for _, m := range bad {
		if _, err := env.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A model-level refusal is poisoned too.
	if _, err := env.Store.Append(ctx, ref, events.Any, events.New(labelled{})...); err != nil {
		t.Fatal(err)
	}
	envs, err := env.Store.Append(ctx, ref, events.Any, events.New(added{N: 2})...)
	if err != nil {
		t.Fatal(err)
	}
	model := newSums()
	stop := runUntil(t, NewRunner(Config{Name: "sums"}, env.JS, registry(), model, poison.New(env.JS), nil), envs[0].Sequence)
	stop()
	if got := model.sum[ref.String()]; got != 3 {
		t.Fatalf("sum = %d, want 3 (the good events around the bad ones)", got)
	}
	entries, err := poison.List(ctx, env.JS, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		t.Fatalf("%d poisoned, want 4: %+v", len(entries), entries)
	}
	for i, want := range []string{"not an event", "unknown event type", "does not decode", "label must not be empty"} {
		if !strings.Contains(entries[i].Reason, want) || entries[i].Consumer != "projection-sums" || entries[i].Sequence == 0 {
			t.Errorf("entry %d = %+v, want reason containing %q", i, entries[i], want)
		}
	}
}

func TestRebuildFromZero(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 5, 10)
	model := newSums()
	r := NewRunner(Config{Name: "rebuildable"}, env.JS, registry(), model, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if err := r.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	before := model.hash()
	if err := r.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	if model.hash() != before {
		t.Fatal("rebuild produced a different model")
	}
	if r.Lag() != 0 {
		t.Fatalf("lag %d after catching up", r.Lag())
	}
}

func TestTypeFilterSkipsOtherEvents(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 3, 10)
	model := newSums()
	stop := runUntil(t, NewRunner(Config{Name: "labels-only", Filter: events.Filter{EventTypes: []string{"test.labelled"}}}, env.JS, registry(), model, nil, nil), last)
	stop()
	if len(model.sum) != 0 || len(model.labels) != 3 {
		b, _ := json.Marshal(model.labels)
		t.Fatalf("sums %v labels %s", model.sum, b)
	}
}

// An idle projection whose stream's leader stops answering (here: the
// probe's second call fails, as from a server cut off from the leader)
// ends its fetch, makes its consumer again and goes on applying events.
func TestIdleProbeRemakesTheConsumerWhenTheStreamDoesNotAnswer(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 3, 5)
	var logs eventstest.SyncBuffer
	model := newSums()
	r := NewRunner(Config{Name: "probed", IdleProbe: 50 * time.Millisecond}, env.JS, registry(), model, nil,
		slog.New(slog.NewTextHandler(&logs, nil)))
	var probes atomic.Int32
	r.probeStream = func(ctx context.Context, s jetstream.Stream) error {
		if probes.Add(1) == 2 {
			return errors.New("simulated: no answer")
		}
		_, err := s.Info(ctx)
		return err
	}
	stop := runUntil(t, r, last)
	defer stop()
	created := func() time.Time {
		c, err := env.JS.Consumer(context.Background(), events.StreamName, "proj-probed")
		if err != nil {
			return time.Time{}
		}
		return c.CachedInfo().Created
	}
	first := created()
	eventstest.Eventually(t, "the consumer made again after the probe failed", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		return created().After(first) && strings.Contains(logs.String(), "does not answer from here"), fmt.Sprintf("%d probes; log:\n%s", probes.Load(), logs.String())
	})
	last = fill(t, env.Store, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitFor(ctx, last); err != nil {
		t.Fatalf("the projection did not go on after the consumer was made again: at %d, want %d", model.Checkpoint(), last)
	}
}
