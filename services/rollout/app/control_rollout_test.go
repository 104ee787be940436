package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// racing is a store where another writer appends to the aggregate just
// before every append of ours, so each of ours loses the race.
type racing struct {
	events.Store
	t *testing.T
}

func (r racing) Append(ctx context.Context, ref events.AggregateRef, expected uint64, drafts ...events.Draft) ([]events.Envelope, error) {
	if expected != events.Any {
		if _, err := r.Store.Append(ctx, ref, events.Any, events.Draft{Payload: bootapi.InstructionWithdrawn{InstructionID: "other"}}); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.Store.Append(ctx, ref, expected, drafts...)
}

// stray is an event on a rollout's subject that the service does not know.
type stray struct{}

func (stray) EventType() string { return "rollout.stray" }

// Control answers as the aggregate executor does: the command on the log
// when the read model has no copy, a stale If-Match 412, a command already
// done a no-op, retries exhausted 409, an event that does not decode 500.
func TestControl(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(t *testing.T, a *App, store events.Store, v uint64) (expected uint64)
		racing  bool
		want    errs.Kind // "": success
		events  int       // the rollout's events appended by the command
	}{
		{name: "paused on the log", events: 1},
		{name: "stale If-Match", want: errs.KindPrecondition,
			prepare: func(_ *testing.T, _ *App, _ events.Store, v uint64) uint64 { return v + 1 }},
		{name: "If-Match that holds", events: 1,
			prepare: func(_ *testing.T, _ *App, _ events.Store, v uint64) uint64 { return v }},
		{name: "already paused", events: 0,
			prepare: func(t *testing.T, a *App, _ events.Store, _ uint64) uint64 {
				if _, err := a.Control(context.Background(), "acme", "ro-1", 0, rollout.Pause{By: "op"}); err != nil {
					t.Fatal(err)
				}
				return 0
			}},
		{name: "every race lost", racing: true, want: errs.KindConflict},
		{name: "an event that does not decode", want: errs.KindInternal,
			prepare: func(t *testing.T, _ *App, store events.Store, _ uint64) uint64 {
				if _, err := store.Append(context.Background(), ref("acme", "ro-1"), events.Any, events.Draft{Payload: stray{}}); err != nil {
					t.Fatal(err)
				}
				return 0
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			reg := rolloutRegistry()
			writes := rolloutRegistry() // the store's: it also knows the stray event
			writes.Register(stray{})
			var store events.Store = events.NewMemoryStore(writes)
			a := &App{Store: store, Events: reg, Registry: poolMachines{}, Rollouts: noRollouts{},
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Retry: aggregate.Retry{MaxAttempts: 3,
					Sleep: func(context.Context, time.Duration) error { return nil }}}
			a.Defaults()
			startTestRollout(t, a)
			before := rolloutEvents(t, store)
			var expected uint64
			if tc.prepare != nil {
				expected = tc.prepare(t, a, store, events.Version(before))
				before = rolloutEvents(t, store)
			}
			if tc.racing {
				a.Store = racing{Store: store, t: t}
			}
			v, err := a.Control(ctx, "acme", "ro-1", expected, rollout.Pause{By: "op", Reason: "lunch"})
			if errs.KindOf(err) != tc.want && (err != nil || tc.want != "") {
				t.Fatalf("error %v (%s), want kind %q", err, errs.KindOf(err), tc.want)
			}
			after := rolloutEvents(t, store)
			appended := 0
			for _, e := range after[len(before):] {
				if e.Type != bootapi.EventTypeInstructionWithdrawn {
					appended++
				}
			}
			if appended != tc.events {
				t.Fatalf("the command appended %d events, want %d", appended, tc.events)
			}
			if err == nil && v != events.Version(after) {
				t.Fatalf("answered version %d; the rollout is at %d", v, events.Version(after))
			}
		})
	}
}

func rolloutEvents(t *testing.T, store events.Store) []events.Envelope {
	t.Helper()
	envs, err := store.Load(context.Background(), ref("acme", "ro-1"))
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// rolloutRegistry knows the events of a rollout's log.
func rolloutRegistry() *events.Registry {
	reg := events.NewRegistry()
	reg.RegisterAll(rollout.EventTypes())
	reg.RegisterAll(bootapi.EventTypes())
	return reg
}

// startTestRollout starts rollout ro-1 of acme's pool web (revision 2, one
// machine at a time) as an apply does.
func startTestRollout(t *testing.T, a *App) {
	t.Helper()
	apply := revapi.ApplyRequested{Pool: "web", Cluster: "c1", Revision: 2, RequestedBy: "token:t1", RolloutID: "ro-1",
		Rollout: revapi.Rollout{MaxUnavailable: "1"}}
	if err := a.StartFromApply(context.Background(), &events.Envelope{ID: "ev-1", Org: "acme"}, apply); err != nil {
		t.Fatal(err)
	}
}
