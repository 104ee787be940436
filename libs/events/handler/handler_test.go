package handler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/poison"
)

type pinged struct {
	N int `json:"n"`
}

func (pinged) EventType() string { return "test.pinged" }

type ponged struct {
	N int `json:"n"`
}

func (ponged) EventType() string { return "test.ponged" }

func registry() *events.Registry {
	r := events.NewRegistry()
	r.Register(pinged{})
	r.Register(ponged{})
	return r
}

func startRouter(t *testing.T, env *eventstest.Env, setup func(r *handler.Router)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := poison.EnsureStream(ctx, env.JS, 1); err != nil {
		t.Fatal(err)
	}
	r, err := handler.NewRouter(env.JS, registry(), poison.New(env.JS), nil, handler.Options{MaxRetries: 2, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	setup(r)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	<-r.Running()
	t.Cleanup(func() { cancel(); <-done })
}

func TestHandlerRetriesThenPoisons(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int]int{}
	done := make(chan struct{}, 10)
	startRouter(t, env, func(r *handler.Router) {
		r.Handle("pinger", events.Filter{AggregateType: "machine"}, func(ctx context.Context, env *events.Envelope, p any) error {
			n := p.(pinged).N
			mu.Lock()
			seen[n]++
			attempts := seen[n]
			mu.Unlock()
			switch {
			case n == 2 && attempts == 1:
				return errors.New("transient") // retried, then succeeds
			case n == 3:
				return errors.New("always fails")
			}
			done <- struct{}{}
			return nil
		})
	})
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	for _, n := range []int{1, 2, 3, 4} {
		if _, err := env.Store.Append(ctx, ref, events.Any, events.New(pinged{N: n})...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: ref.Subject(), Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("events were not handled")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	var entries []poison.Entry
	for time.Now().Before(deadline) {
		entries, _ = poison.List(ctx, env.JS, 10)
		if len(entries) >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(entries) != 2 {
		t.Fatalf("poisoned %d, want 2 (the failing event and the garbage)", len(entries))
	}
	if !strings.Contains(entries[0].Reason, "always fails") || entries[0].Consumer != "pinger" || entries[0].Sequence != 3 {
		t.Errorf("first poisoned: %+v", entries[0])
	}
	if !strings.Contains(entries[1].Reason, "not an event") {
		t.Errorf("second poisoned: %+v", entries[1])
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[2] != 2 || seen[3] != 3 {
		t.Errorf("attempts: %v (want 2 for the transient failure, 1+2 retries for the permanent one)", seen)
	}
}

// One trace follows an append, the handler it triggers, and the command the
// handler sends, including the command's reply.
func TestTraceSpansAppendHandlerAndCommand(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	env := eventstest.Start(t, registry())
	srv := command.NewServer(env.Conn, "test", 4, nil)
	type echoReq struct {
		N int `json:"n"`
	}
	if err := command.Handle(srv, "cmd.test.echo", func(ctx context.Context, r echoReq) (echoReq, error) { return r, nil }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	var replied atomic.Int64
	handled := make(chan struct{})
	startRouter(t, env, func(r *handler.Router) {
		r.Handle("echoer", events.Filter{}, func(ctx context.Context, e *events.Envelope, p any) error {
			resp, err := command.Call[echoReq, echoReq](ctx, env.Conn, "cmd.test.echo", echoReq{N: p.(pinged).N})
			if err != nil {
				return err
			}
			replied.Store(int64(resp.N))
			close(handled)
			return nil
		})
	})

	ctx, root := otel.Tracer("test").Start(context.Background(), "test request")
	if _, err := env.Store.Append(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}, 0, events.New(pinged{N: 42})...); err != nil {
		t.Fatal(err)
	}
	root.End()
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("handler did not run")
	}
	if replied.Load() != 42 {
		t.Fatalf("reply %d", replied.Load())
	}
	want := map[string]trace.SpanKind{
		"test request":         trace.SpanKindInternal,
		"append machine":       trace.SpanKindProducer,
		"handle test.pinged":   trace.SpanKindConsumer,
		"call cmd.test.echo":   trace.SpanKindClient,
		"handle cmd.test.echo": trace.SpanKindServer,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans := rec.Ended()
		got := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			got[s.Name()] = s
		}
		missing := ""
		for name := range want {
			if _, ok := got[name]; !ok {
				missing = name
			}
		}
		if missing == "" {
			traceID := root.SpanContext().TraceID()
			for name, kind := range want {
				s := got[name]
				if s.SpanContext().TraceID() != traceID {
					t.Errorf("span %q is in trace %s, want %s", name, s.SpanContext().TraceID(), traceID)
				}
				if s.SpanKind() != kind {
					t.Errorf("span %q kind %v, want %v", name, s.SpanKind(), kind)
				}
			}
			// parentage: server <- client <- handler <- append <- root
			parent := func(child, par string) {
				if got[child].Parent().SpanID() != got[par].SpanContext().SpanID() {
					t.Errorf("%q is not a child of %q", child, par)
				}
			}
			parent("append machine", "test request")
			parent("handle test.pinged", "append machine")
			parent("call cmd.test.echo", "handle test.pinged")
			parent("handle cmd.test.echo", "call cmd.test.echo")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("span %q never ended; have %d spans", missing, len(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A handler that takes some event types gets only those; the others are
// acknowledged for it, so that its consumer moves past them.
func TestHandlerSkipsOtherTypesAndAcksThem(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	var got []int
	var mu sync.Mutex
	startRouter(t, env, func(r *handler.Router) {
		r.Handle("pings-only", events.Filter{AggregateType: "machine", EventTypes: []string{"test.pinged"}},
			func(ctx context.Context, env *events.Envelope, p any) error {
				mu.Lock()
				got = append(got, p.(pinged).N)
				mu.Unlock()
				return nil
			})
	})
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	var last uint64
	for n := range 30 {
		var p events.Payload = ponged{N: n}
		if n%10 == 0 {
			p = pinged{N: n}
		}
		stored, err := env.Store.Append(ctx, ref, events.Any, events.New(p)...)
		if err != nil {
			t.Fatal(err)
		}
		last = stored[len(stored)-1].Sequence
	}
	eventstest.Eventually(t, "every event acknowledged", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		c, err := env.JS.Consumer(ctx, events.StreamName, "handler-pings-only")
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.AckFloor.Stream == last && info.NumAckPending == 0 && info.NumPending == 0,
			fmt.Sprintf("ack floor %d of %d, %d pending acks, %d pending", info.AckFloor.Stream, last, info.NumAckPending, info.NumPending)
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != "[0 10 20]" {
		t.Fatalf("handled %v, want the pings 0, 10 and 20 only", got)
	}
}

// InParallel handles events of different keys at once (the first event
// waits for the second to start: one at a time, it would wait forever),
// never two of one key, and each key's events in the order of the log,
// all from one subject; an event that does not decode goes to the poison
// queue as before.
func TestHandlerInParallelKeepsEachKeysOrder(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	const total = 60
	keyOf := func(n int) string { return fmt.Sprint("k", n%3) }
	var (
		mu                  sync.Mutex
		active              = map[string]int{}
		order               = map[string][]int{}
		sameKeyAtOnce       int
		running, mostAtOnce int
		handled             int
	)
	// Events 0 and 1 (two keys) each wait until the other has started,
	// whichever the router hands over first: they can only both finish if
	// they were handled at once.
	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var startOnce [2]sync.Once
	startRouter(t, env, func(r *handler.Router) {
		r.Handle("in-parallel", events.Filter{AggregateType: "rollout"}, func(ctx context.Context, env *events.Envelope, p any) error {
			n := p.(pinged).N
			k := keyOf(n)
			mu.Lock()
			if active[k]++; active[k] > 1 {
				sameKeyAtOnce++
			}
			running++
			mostAtOnce = max(mostAtOnce, running)
			order[k] = append(order[k], n)
			mu.Unlock()
			if n < 2 {
				startOnce[n].Do(func() { close(started[n]) })
				select {
				case <-started[1-n]:
				case <-time.After(30 * time.Second):
					t.Errorf("event %d did not start while event %d was being handled", 1-n, n)
				}
			}
			mu.Lock()
			active[k]--
			running--
			handled++
			mu.Unlock()
			return nil
		}, handler.InParallel(4, func(_ *events.Envelope, p any) string { return keyOf(p.(pinged).N) }))
	})
	ref := events.AggregateRef{Org: "acme", Type: "rollout", ID: "r1"}
	for n := range total {
		if n == total/2 {
			if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: ref.Subject(), Data: []byte("garbage")}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := env.Store.Append(ctx, ref, events.Any, events.New(pinged{N: n})...); err != nil {
			t.Fatal(err)
		}
	}
	eventstest.Eventually(t, "every event handled and the garbage poisoned", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		mu.Lock()
		n := handled
		mu.Unlock()
		entries, _ := poison.List(ctx, env.JS, 10)
		return n == total && len(entries) == 1, fmt.Sprintf("%d of %d handled, %d poisoned", n, total, len(entries))
	})
	mu.Lock()
	defer mu.Unlock()
	if sameKeyAtOnce > 0 {
		t.Errorf("%d times two events of one key were handled at once", sameKeyAtOnce)
	}
	if mostAtOnce < 2 {
		t.Errorf("at most %d event at once, want several", mostAtOnce)
	}
	for k, ns := range order {
		for i := 1; i < len(ns); i++ {
			if ns[i] <= ns[i-1] {
				t.Errorf("key %s handled out of the log's order: %v", k, ns)
				break
			}
		}
	}
}

// A parallel handler asks the server for more events at once than one
// taking them one at a time (8 per slot), so that a consumer passing over
// most of its events, or waiting on busy slots, still has the next ones
// at hand: with its 64 slots held (the boot service's instruction
// handlers), the consumer's window fills beyond the 64 a handler used to
// ask for and the 256 unacknowledged events its consumer used to allow,
// and every event is handled once released.
func TestHandlerInParallelPullsAWiderWindow(t *testing.T) {
	env := eventstest.Start(t, registry())
	ctx := context.Background()
	const total, slots = 700, 64
	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[int]int{}
	startRouter(t, env, func(r *handler.Router) {
		r.Handle("wide", events.Filter{AggregateType: "rollout"}, func(ctx context.Context, env *events.Envelope, p any) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			handled[p.(pinged).N]++
			mu.Unlock()
			return nil
		}, handler.InParallel(slots, func(_ *events.Envelope, p any) string { return fmt.Sprint(p.(pinged).N) }))
	})
	ref := events.AggregateRef{Org: "acme", Type: "rollout", ID: "r1"}
	for n := range total {
		if _, err := env.Store.Append(ctx, ref, events.Any, events.New(pinged{N: n})...); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := env.JS.Consumer(ctx, events.StreamName, "handler-wide")
	if err != nil {
		t.Fatal(err)
	}
	eventstest.Eventually(t, "the consumer's window past 256 events while the slots are held", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.NumAckPending > 300, fmt.Sprintf("%d delivered and not acknowledged (max ack pending %d), %d not delivered",
			info.NumAckPending, info.Config.MaxAckPending, info.NumPending)
	})
	close(release)
	eventstest.Eventually(t, "every event handled", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == total, fmt.Sprintf("%d of %d handled", len(handled), total)
	})
	mu.Lock()
	defer mu.Unlock()
	for n, times := range handled {
		if times != 1 {
			t.Errorf("event %d handled %d times", n, times)
		}
	}
}
