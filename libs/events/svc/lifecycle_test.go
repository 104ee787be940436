package svc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

type ticked struct {
	N int `json:"n"`
}

func (ticked) EventType() string { return "thing.ticked" }

// gatedModel applies nothing until its gate opens, so that a test sees
// its projection catching up for as long as it wants.
type gatedModel struct {
	gate       chan struct{}
	mu         sync.Mutex
	applied    int
	checkpoint uint64
}

func (m *gatedModel) Apply(env *events.Envelope, _ any) error {
	<-m.gate
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied++
	m.checkpoint = env.Sequence
	return nil
}
func (m *gatedModel) Skip(seq uint64) { m.mu.Lock(); m.checkpoint = seq; m.mu.Unlock() }
func (m *gatedModel) Checkpoint() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkpoint
}
func (m *gatedModel) Reset() { m.mu.Lock(); m.applied, m.checkpoint = 0, 0; m.mu.Unlock() }

func startRuntime(t *testing.T, env *eventstest.Env, reg *events.Registry) *svc.Runtime {
	t.Helper()
	rt, err := svc.Start(context.Background(), svc.Config{Service: "things", StreamReplicas: 1}, reg,
		svc.Options{Conn: env.Connect(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// A projection run by the runtime holds readiness back, naming itself and
// its lag, until it has caught up; CatchUp returns once it has.
func TestProjectHoldsReadinessUntilCaughtUp(t *testing.T) {
	reg := events.NewRegistry()
	reg.RegisterAll([]any{ticked{}})
	env := eventstest.Start(t, reg)
	ctx := context.Background()
	ref := events.AggregateRef{Org: "acme", Type: "thing", ID: "t1"}
	for i := range 20 {
		if _, err := env.Store.Append(ctx, ref, events.Any, events.New(ticked{N: i})...); err != nil {
			t.Fatal(err)
		}
	}
	rt := startRuntime(t, env, reg)
	model := &gatedModel{gate: make(chan struct{})}
	r := projection.NewRunner(projection.Config{Name: "things", Filter: events.Filter{AggregateType: "thing"}}, rt.JS, reg, model, rt.Poison, rt.Log)
	rt.Project(r)
	rt.Started()
	failed := rt.Health.Ready(ctx)
	if why := failed["projection things"]; !strings.Contains(why, "catching up with the event log") {
		t.Fatalf("readiness while the projection is held back = %v, want projection things catching up", failed)
	}
	caughtUp := make(chan bool, 1)
	go func() { caughtUp <- rt.CatchUp(ctx) }()
	close(model.gate)
	if !<-caughtUp {
		t.Fatal("CatchUp reported a stop, want caught up")
	}
	if failed := rt.Health.Ready(ctx); len(failed) != 0 {
		t.Fatalf("not ready once caught up: %v", failed)
	}
	model.mu.Lock()
	applied := model.applied
	model.mu.Unlock()
	if applied != 20 {
		t.Fatalf("applied %d events before catching up, want 20", applied)
	}
}

// Background work that fails stops the service: CatchUp gives up, Wait
// returns the failure named, and the service stops in order: the steps
// that stop it taking work first, in the order they were added, then
// background work, which Wait waits for.
func TestBackgroundFailureStopsTheServiceInOrder(t *testing.T) {
	reg := events.NewRegistry()
	reg.RegisterAll([]any{ticked{}})
	env := eventstest.Start(t, reg)
	ref := events.AggregateRef{Org: "acme", Type: "thing", ID: "t1"}
	if _, err := env.Store.Append(context.Background(), ref, events.Any, events.New(ticked{N: 1})...); err != nil {
		t.Fatal(err)
	}
	rt := startRuntime(t, env, reg)
	// A projection that never catches up: CatchUp can end only by the failure.
	held := &gatedModel{gate: make(chan struct{})}
	rt.Project(projection.NewRunner(projection.Config{Name: "things", Filter: events.Filter{AggregateType: "thing"}}, rt.JS, reg, held, rt.Poison, rt.Log))

	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	rt.OnStop(func() { note("stop commands") })
	rt.OnStop(func() { note("stop listener") })
	rt.Go("watch", func(ctx context.Context) error {
		<-ctx.Done()
		note("watch ended")
		return ctx.Err() // an error after the stop is not a failure
	})
	rt.Go("finished", func(context.Context) error { return nil }) // ends only itself
	boom := errors.New("the stream vanished")
	release := make(chan struct{})
	rt.Go("loop", func(context.Context) error { <-release; return boom })

	caughtUp := make(chan bool, 1)
	go func() { caughtUp <- rt.CatchUp(context.Background()) }()
	close(release)
	if <-caughtUp {
		t.Fatal("CatchUp reported caught up, want a stop: the projection never caught up and background work failed")
	}
	// Let the held projection go, so that it can see the stop (an Apply
	// in progress does not watch the context).
	close(held.gate)
	err := rt.Wait(context.Background())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "things: loop stopped") {
		t.Fatalf("Wait = %v, want the loop's failure, named", err)
	}
	mu.Lock()
	got := slices.Clone(order)
	mu.Unlock()
	if want := []string{"stop commands", "stop listener", "watch ended"}; !slices.Equal(got, want) {
		t.Fatalf("stop order = %v, want %v", got, want)
	}
}

// When ctx ends, Wait stops the service and returns nil.
func TestWaitReturnsNilWhenCtxEnds(t *testing.T) {
	reg := events.NewRegistry()
	env := eventstest.Start(t, reg)
	rt := startRuntime(t, env, reg)
	stopped := make(chan struct{})
	rt.Go("watch", func(ctx context.Context) error { <-ctx.Done(); close(stopped); return ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rt.Wait(ctx); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Wait returned before background work ended")
	}
}
