package aggregate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// added is the test aggregate's one event: it adds N to a tally.
type added struct {
	N int `json:"n"`
}

func (added) EventType() string { return "test.added" }

// garbled is stored with an int and read as a string, so it never decodes.
type garbled struct {
	N int `json:"n"`
}

func (garbled) EventType() string { return "test.garbled" }

type garbledReader struct {
	N string `json:"n"`
}

func (garbledReader) EventType() string { return "test.garbled" }

// stranger is an event type the executor's registry does not know.
type stranger struct{}

func (stranger) EventType() string { return "test.stranger" }

// notAnEvent has no EventType: a decision that returns it is a bug.
type notAnEvent struct{}

type tally struct {
	Sum, Count int
}

func applyTally(s tally, _ *events.Envelope, p any) tally {
	if a, ok := p.(added); ok {
		s.Sum += a.N
		s.Count++
	}
	return s
}

// writeRegistry is what the store encodes with: everything a test stores.
func writeRegistry() *events.Registry {
	r := events.NewRegistry()
	r.Register(added{})
	r.Register(garbled{})
	r.Register(stranger{})
	return r
}

// readRegistry is the executor's: it reads test.garbled into a type its
// payload does not fit, and does not know test.stranger.
func readRegistry() *events.Registry {
	r := events.NewRegistry()
	r.Register(added{})
	r.Register(garbledReader{})
	return r
}

// sleeps records the back-off waits instead of waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(_ context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return nil
}

// fixture is one row's store, executor and aggregate.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	store   events.Store
	stop    func() // makes the store unavailable; nil when it cannot be
	x       *aggregate.Executor[tally]
	ref     events.AggregateRef
	slept   *sleeps
	decided int
}

// seed appends payloads to the aggregate as another writer would.
func (f *fixture) seed(payloads ...events.Payload) uint64 {
	f.t.Helper()
	envs, err := f.store.Append(f.ctx, f.ref, events.Any, events.New(payloads...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return events.Version(envs)
}

func (f *fixture) version() uint64 {
	f.t.Helper()
	envs, err := f.store.Load(f.ctx, f.ref)
	if err != nil {
		f.t.Fatal(err)
	}
	return events.Version(envs)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// decide returns a decision that counts its calls, checks the injected
// clock, runs interfere (another writer getting in between its load and
// its append) and then adds n.
func (f *fixture) decide(n int, interfere func(call int) bool) func(tally, time.Time) ([]any, error) {
	return func(_ tally, now time.Time) ([]any, error) {
		f.decided++
		if !now.Equal(t0) {
			f.t.Errorf("decided at %s, not at the injected clock's %s", now, t0)
		}
		if interfere != nil && interfere(f.decided) {
			f.seed(added{N: 100})
		}
		if n == 0 {
			return nil, nil
		}
		return []any{added{N: n}}, nil
	}
}

func always(int) bool { return true }

const maxAttempts = 3

// TestExecute runs every outcome of a command against both stores: the
// memory store and a real JetStream.
func TestExecute(t *testing.T) {
	seed := eventstest.Seed(t, uint64(time.Now().UnixNano()))
	type want struct {
		kind     errs.Kind // "": success
		decided  int
		sleeps   int
		stored   int
		sum      int // of the result's state, on success
		logCount int // events of the aggregate in the log afterwards
	}
	rows := []struct {
		name   string
		run    func(f *fixture) (aggregate.Result[tally], error)
		want   want
		jsOnly string // why the memory store cannot run the row
	}{
		{
			name: "success",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: func(s tally, now time.Time) ([]any, error) {
					f.decided++
					return []any{added{N: 1}, added{N: 2}}, nil
				}})
			},
			want: want{decided: 1, stored: 2, sum: 3, logCount: 2},
		},
		{
			name: "an event whose ID the decision chose keeps it",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				res, err := f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: func(tally, time.Time) ([]any, error) {
					f.decided++
					return []any{events.Draft{ID: "chosen-" + f.ref.ID, Payload: added{N: 6}}}, nil
				}})
				if err == nil && (res.Stored[0].ID != "chosen-"+f.ref.ID || res.Events[0] != any(added{N: 6})) {
					f.t.Errorf("stored %+v as %+v", res.Events[0], res.Stored[0])
				}
				return res, err
			},
			want: want{decided: 1, stored: 1, sum: 6, logCount: 1},
		},
		{
			name: "no-op decision appends nothing",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 5})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(0, nil)})
			},
			want: want{decided: 1, sum: 5, logCount: 1},
		},
		{
			name: "pinned version that is not the aggregate's",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				v := f.seed(added{N: 1})
				f.seed(added{N: 2})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Expected: v, Decide: f.decide(1, nil)})
			},
			want: want{kind: errs.KindPrecondition, logCount: 2},
		},
		{
			name: "pinned version that lost the race at the append",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				v := f.seed(added{N: 1})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Expected: v, Decide: f.decide(1, always)})
			},
			want: want{kind: errs.KindPrecondition, decided: 1, logCount: 2},
		},
		{
			name: "pinned version of an aggregate without events: the decision's refusal stands",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Expected: 7, Decide: func(tally, time.Time) ([]any, error) {
					f.decided++
					return nil, errs.NotFound("no such tally")
				}})
			},
			want: want{kind: errs.KindNotFound, decided: 1},
		},
		{
			name: "pinned version of an aggregate without events: a decision that would act is refused",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Expected: 7, Decide: f.decide(1, nil)})
			},
			want: want{kind: errs.KindPrecondition, decided: 1},
		},
		{
			name: "race lost, then won after a back-off",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 1})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, func(call int) bool { return call == 1 })})
			},
			want: want{decided: 2, sleeps: 1, stored: 1, sum: 102, logCount: 3},
		},
		{
			name: "retries exhausted",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, always)})
			},
			want: want{kind: errs.KindConflict, decided: maxAttempts, sleeps: maxAttempts - 1, logCount: maxAttempts},
		},
		{
			name: "stale cached copy: decided again on the log, without back-off",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 4})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, nil),
					Cached: func() (tally, uint64, bool) { return tally{}, 0, true }})
			},
			want: want{decided: 2, stored: 1, sum: 5, logCount: 2},
		},
		{
			name: "pinned version against a stale cached copy: the log decides",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				v := f.seed(added{N: 4})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Expected: v, Decide: f.decide(1, nil),
					Cached: func() (tally, uint64, bool) { return tally{}, 0, true }})
			},
			want: want{decided: 2, stored: 1, sum: 5, logCount: 2},
		},
		{
			name: "no-op on a cached copy is decided again on the log",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				v := f.seed(added{N: 4})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(0, nil),
					Cached: func() (tally, uint64, bool) { return tally{Sum: 4, Count: 1}, v, true }})
			},
			want: want{decided: 2, sum: 4, logCount: 1},
		},
		{
			name: "no-op on a cached copy that Version confirms stands",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				v := f.seed(added{N: 4})
				f.x.Version = func(ctx context.Context, ref events.AggregateRef) (uint64, error) { return f.version(), nil }
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(0, nil),
					Cached: func() (tally, uint64, bool) { return tally{Sum: 4, Count: 1}, v, true }})
			},
			want: want{decided: 1, sum: 4, logCount: 1},
		},
		{
			name: "stored event that does not decode",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 1}, garbled{N: 2})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, nil)})
			},
			want: want{kind: errs.KindInternal, logCount: 2},
		},
		{
			name: "stored event of an unknown type",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(stranger{})
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, nil)})
			},
			want: want{kind: errs.KindInternal, logCount: 1},
		},
		{
			name: "decision that returns something other than an event",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: func(tally, time.Time) ([]any, error) {
					f.decided++
					return []any{notAnEvent{}}, nil
				}})
			},
			want: want{kind: errs.KindInternal, decided: 1},
		},
		{
			name: "caller gone before the store answers",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 1})
				ctx, cancel := context.WithCancel(f.ctx)
				cancel()
				return f.x.Execute(ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, nil)})
			},
			want: want{kind: errs.KindUnavailable, logCount: 1},
		},
		{
			name: "store unavailable",
			run: func(f *fixture) (aggregate.Result[tally], error) {
				f.seed(added{N: 1})
				f.stop()
				return f.x.Execute(f.ctx, aggregate.Command[tally]{Ref: f.ref, Decide: f.decide(1, nil)})
			},
			want:   want{kind: errs.KindUnavailable, logCount: -1},
			jsOnly: "the memory store cannot fail",
		},
	}
	stores := []struct {
		name string
		open func(t *testing.T) (events.Store, func())
	}{
		{"memory", func(*testing.T) (events.Store, func()) { return events.NewMemoryStore(writeRegistry()), nil }},
		{"jetstream", func(t *testing.T) (events.Store, func()) {
			env := eventstest.Start(t, writeRegistry())
			return env.Store, env.Stop
		}},
	}
	for _, st := range stores {
		for i, row := range rows {
			t.Run(st.name+"/"+row.name, func(t *testing.T) {
				if row.jsOnly != "" && st.name != "jetstream" {
					t.Skip(row.jsOnly)
				}
				store, stop := st.open(t)
				f := &fixture{t: t, ctx: context.Background(), store: store, stop: stop, slept: &sleeps{},
					ref: events.AggregateRef{Org: "acme", Type: "tally", ID: fmt.Sprintf("t%d", i)}}
				f.x = &aggregate.Executor[tally]{Store: store, Registry: readRegistry(), Apply: applyTally,
					Clock: func() time.Time { return t0 },
					Retry: aggregate.Retry{MaxAttempts: maxAttempts, Jitter: aggregate.SeededJitter(seed), Sleep: f.slept.sleep}}
				res, err := row.run(f)
				w := row.want
				if got := errs.KindOf(err); got != w.kind {
					t.Fatalf("error %v (kind %q), want kind %q", err, got, w.kind)
				}
				if err != nil {
					t.Logf("answers: %v", err)
				}
				if f.decided != w.decided {
					t.Errorf("decided %d times, want %d", f.decided, w.decided)
				}
				if len(f.slept.waits) != w.sleeps {
					t.Errorf("backed off %d times (%v), want %d", len(f.slept.waits), f.slept.waits, w.sleeps)
				}
				for n, d := range f.slept.waits {
					if bound := aggregate.DefaultBackoff << n; d < 0 || d >= bound {
						t.Errorf("wait %d is %s, not in [0, %s)", n+1, d, bound)
					}
				}
				if len(res.Stored) != w.stored || len(res.Events) != w.stored {
					t.Errorf("stored %d envelopes and %d events, want %d", len(res.Stored), len(res.Events), w.stored)
				}
				if w.logCount >= 0 {
					envs, lerr := store.Load(f.ctx, f.ref)
					if lerr != nil {
						t.Fatal(lerr)
					}
					if len(envs) != w.logCount {
						t.Errorf("the log holds %d events of the aggregate, want %d", len(envs), w.logCount)
					}
					if err == nil && res.Version != events.Version(envs) {
						t.Errorf("result version %d, the log's %d", res.Version, events.Version(envs))
					}
				}
				if err == nil && res.State.Sum != w.sum {
					t.Errorf("state %+v, want sum %d", res.State, w.sum)
				}
			})
		}
	}
}

// TestSeededJitterRepeats: one seed, one sequence of waits, each within
// its bound.
func TestSeededJitterRepeats(t *testing.T) {
	seed := eventstest.Seed(t, uint64(time.Now().UnixNano()))
	a, b := aggregate.SeededJitter(seed), aggregate.SeededJitter(seed)
	for i := range 100 {
		bound := time.Duration(i+1) * time.Millisecond
		x, y := a(bound), b(bound)
		if x != y || x < 0 || x >= bound {
			t.Fatalf("draw %d: %s and %s from one seed, bound %s", i, x, y, bound)
		}
	}
	if d := a(0); d != 0 {
		t.Fatalf("a zero bound drew %s", d)
	}
}
