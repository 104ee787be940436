// Package aggregate runs a command on one event-sourced aggregate: load its
// events (or start from a copy the caller already holds), decide, append
// with the version the decision was made on, and decide again when another
// writer got there first. Every service's commands run through it, so that
// they answer alike:
//
//   - the caller pinned a version (If-Match) and the aggregate is at another:
//     errs.Precondition (HTTP 412), never retried;
//   - the command lost the race MaxAttempts times in a row: errs.Conflict
//     (409), so the caller may try again;
//   - a stored event does not decode (unknown type, newer schema, bad JSON):
//     errs.Internal (500); it is never skipped and never panics;
//   - the store fails or does not answer (or ctx ends): errs.Unavailable
//     (503), keeping any typed error the store returned;
//   - the decision's own refusal is returned as the decision returned it.
package aggregate

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Defaults of a zero Retry.
const (
	DefaultMaxAttempts = 8
	DefaultBackoff     = 5 * time.Millisecond
	DefaultMaxBackoff  = 320 * time.Millisecond
)

// Retry says how often and after what wait a command that lost an
// optimistic-concurrency race is decided again.
type Retry struct {
	// MaxAttempts bounds the decisions made on the log for one command (a
	// decision on a cached copy does not count); 0: DefaultMaxAttempts.
	MaxAttempts int
	// Backoff bounds the wait before the first re-decision, and doubles
	// for each further one up to MaxBackoff; 0: the defaults.
	Backoff, MaxBackoff time.Duration
	// Jitter returns a random duration in [0, bound) ("full jitter", so
	// that racing writers spread out and each round lets one through); nil:
	// math/rand/v2. SeededJitter makes a reproducible one.
	Jitter func(bound time.Duration) time.Duration
	// Sleep waits d or until ctx ends; nil: clock.Sleep. Tests pass one that
	// records the waits instead of waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// SeededJitter is a Jitter drawing from a PCG seeded with seed, safe for
// concurrent use.
func SeededJitter(seed uint64) func(time.Duration) time.Duration {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(bound time.Duration) time.Duration {
		if bound <= 0 {
			return 0
		}
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(r.Int64N(int64(bound)))
	}
}

// Executor runs commands on aggregates whose folded state is S. It holds no
// state of its own: one value may serve any number of goroutines.
type Executor[S any] struct {
	// Store, Registry and Apply are required. Registry decodes stored
	// events; the payloads a decision returns must be registered in it.
	Store    events.Store
	Registry *events.Registry
	// Initial is the state of an aggregate without events; nil: S's zero
	// value. With a pointer S it must return a fresh value every time.
	Initial func() S
	// Apply folds one decoded event into s and returns the result. It may
	// modify s: the executor applies events only to states it loaded or
	// that the caller handed over (Command.Cached).
	Apply func(s S, env *events.Envelope, payload any) S
	// Clock is the time decisions are made at; nil: time.Now.
	Clock func() time.Time
	Retry Retry
	// Version, when set, reads an aggregate's version without its events:
	// a refusal or a no-op decided on a cached copy at that very version
	// then stands without reading the log.
	Version func(ctx context.Context, ref events.AggregateRef) (uint64, error)
}

// Command is one decision to run on one aggregate.
type Command[S any] struct {
	Ref events.AggregateRef
	// Expected is the version the caller read and pins (its If-Match); 0:
	// none. A pinned command is never re-decided on a newer version.
	Expected uint64
	// Cached, when set, offers a copy of the state and its version (a read
	// model's) to decide on first, which saves reading the log. ok false:
	// no copy. The copy is trusted only as far as the optimistic append
	// confirms it: a stale one costs a conflict and a decision on the log
	// (without back-off: no one is racing), and a refusal, a no-op or a
	// pin mismatch decided on it is decided again on the log (unless
	// Executor.Version confirms the copy). The copy must be the caller's
	// own: events are applied to it.
	Cached func() (state S, version uint64, ok bool)
	// Decide returns the events the command makes of state at now (none:
	// nothing changes), or why it refuses. Each is a payload, or an
	// events.Draft whose ID the caller chose. It is called again after every
	// lost race, so it must not have effects; one that must ask another
	// service captures its context and asks again on every call.
	Decide func(state S, now time.Time) ([]any, error)
}

// Result is what a command did.
type Result[S any] struct {
	// State and Version are the aggregate after the appended events (as
	// the last decision saw it when nothing was appended).
	State   S
	Version uint64
	// Stored are the appended envelopes and Events their payloads, in the
	// same order; both are empty for a no-op or a refusal.
	Stored []events.Envelope
	Events []any
	// Attempts counts the decisions made, the one on a cached copy included.
	Attempts int
}

// Execute runs c: see the package documentation for its answers.
func (x *Executor[S]) Execute(ctx context.Context, c Command[S]) (Result[S], error) {
	var res Result[S]
	if err := x.check(); err != nil {
		return res, err
	}
	expected := c.Expected
	maxAttempts := x.Retry.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	tryCache := c.Cached != nil
	lost := 0 // races lost on the log's state, in a row
	for {
		var state S
		var version uint64
		fromCache := false
		if tryCache {
			tryCache = false
			state, version, fromCache = c.Cached()
		}
		if !fromCache {
			var err error
			if state, version, err = x.Load(ctx, c.Ref); err != nil {
				return res, err
			}
		}
		res.Attempts++
		res.State, res.Version = state, version
		// A pin is checked against an aggregate that exists; one without
		// events is the decision's to refuse (not found), as it would be
		// without the pin, and refused below if the decision would act.
		if expected != 0 && version != 0 && version != expected {
			if fromCache {
				continue // the copy may lag: ask the log
			}
			return res, stale(c.Ref, expected, version)
		}
		evs, err := c.Decide(state, x.now())
		if fromCache && (err != nil || len(evs) == 0) {
			// Only an append proves a cached copy current.
			if x.confirmed(ctx, c.Ref, version) {
				return res, err
			}
			continue
		}
		if err != nil {
			return res, err
		}
		if expected != 0 && version == 0 {
			if fromCache {
				continue
			}
			return res, stale(c.Ref, expected, version)
		}
		if len(evs) == 0 {
			return res, nil
		}
		drafts, evs, err := x.drafts(evs)
		if err != nil {
			return res, err
		}
		stored, err := x.Store.Append(ctx, c.Ref, version, drafts...)
		// A store that appends event by event may have stored a prefix
		// before failing: it is in the log, so it is in the result.
		for i := range stored {
			state = x.Apply(state, &stored[i], evs[i])
		}
		res.Stored = append(res.Stored, stored...)
		res.Events = append(res.Events, evs[:len(stored)]...)
		if len(stored) > 0 {
			res.State, res.Version = state, stored[len(stored)-1].Sequence
			// The pin held for the prefix: the command was admitted, and
			// what remains of it is decided on whatever follows.
			expected = 0
		}
		var conflict *events.ConflictError
		switch {
		case err == nil:
			return res, nil
		case !errors.As(err, &conflict):
			return res, storeErr("appending to "+c.Ref.String(), err)
		case fromCache:
			continue
		case expected != 0:
			return res, stale(c.Ref, expected, conflict.Actual)
		}
		lost++
		if lost >= maxAttempts {
			return res, errs.Conflict("%s %q changed concurrently %d times while this command was decided; try again", c.Ref.Type, c.Ref.ID, lost)
		}
		if err := x.backoff(ctx, lost); err != nil {
			return res, err
		}
	}
}

// Load folds every event of ref into a fresh state and returns it with
// the aggregate's version (0: no events).
func (x *Executor[S]) Load(ctx context.Context, ref events.AggregateRef) (S, uint64, error) {
	state := x.initial()
	if err := x.check(); err != nil {
		return state, 0, err
	}
	envs, err := x.Store.Load(ctx, ref)
	if err != nil {
		return state, 0, storeErr("loading "+ref.String(), err)
	}
	for i := range envs {
		if state, err = x.fold(state, ref, &envs[i]); err != nil {
			return state, 0, err
		}
	}
	return state, events.Version(envs), nil
}

// LoadAt folds the events of ref up to at (time travel).
func (x *Executor[S]) LoadAt(ctx context.Context, ref events.AggregateRef, at events.Position) (S, uint64, error) {
	state := x.initial()
	if err := x.check(); err != nil {
		return state, 0, err
	}
	var version uint64
	var decodeErr error
	f := events.Filter{Org: ref.Org, AggregateType: ref.Type, AggregateID: ref.ID}
	err := x.Store.Replay(ctx, f, events.Position{}, at, func(env *events.Envelope) error {
		var err error
		if state, err = x.fold(state, ref, env); err != nil {
			decodeErr = err
			return err
		}
		version = env.Sequence
		return nil
	})
	if decodeErr != nil {
		return state, 0, decodeErr
	}
	if err != nil {
		return state, 0, storeErr("replaying "+ref.String(), err)
	}
	return state, version, nil
}

func (x *Executor[S]) fold(state S, ref events.AggregateRef, env *events.Envelope) (S, error) {
	payload, err := x.Registry.Decode(env)
	if err != nil {
		return state, errs.Internal("%s: stored event %d (%s) does not decode: %v", ref, env.Sequence, env.Type, err)
	}
	return x.Apply(state, env, payload), nil
}

// check refuses an executor that lacks what it cannot work without, as
// an error rather than a nil dereference.
func (x *Executor[S]) check() error {
	if x.Store == nil || x.Registry == nil || x.Apply == nil {
		return errs.Internal("the aggregate executor needs a Store, a Registry and an Apply function")
	}
	return nil
}

func (x *Executor[S]) initial() S {
	if x.Initial != nil {
		return x.Initial()
	}
	var zero S
	return zero
}

func (x *Executor[S]) now() time.Time {
	if x.Clock != nil {
		return x.Clock()
	}
	return time.Now()
}

// confirmed reports whether the log's version of ref is version, read
// without its events; false when it cannot be read that way.
func (x *Executor[S]) confirmed(ctx context.Context, ref events.AggregateRef, version uint64) bool {
	if x.Version == nil {
		return false
	}
	v, err := x.Version(ctx, ref)
	return err == nil && v == version
}

// drafts checks that every event is a registered payload before anything
// is appended: a decision that returns anything else is a bug, and must
// not look like an unavailable store. An event given as an events.Draft
// keeps its ID (so that an append retried after a crash stores it once);
// payloads are the events without their drafts.
func (x *Executor[S]) drafts(evs []any) (drafts []events.Draft, payloads []any, err error) {
	drafts = make([]events.Draft, len(evs))
	payloads = make([]any, len(evs))
	for i, e := range evs {
		d, ok := e.(events.Draft)
		if !ok {
			p, isPayload := e.(events.Payload)
			if !isPayload {
				return nil, nil, errs.Internal("the decision returned %T, which is not an event payload", e)
			}
			d = events.Draft{Payload: p}
		}
		if d.Payload == nil {
			return nil, nil, errs.Internal("the decision returned a draft without a payload")
		}
		if !x.Registry.Known(d.Payload.EventType()) {
			return nil, nil, errs.Internal("the decision returned event type %q, which is not registered", d.Payload.EventType())
		}
		drafts[i], payloads[i] = d, d.Payload
	}
	return drafts, payloads, nil
}

// backoff waits before the re-decision after the n-th lost race.
func (x *Executor[S]) backoff(ctx context.Context, n int) error {
	base, ceiling := x.Retry.Backoff, x.Retry.MaxBackoff
	if base <= 0 {
		base = DefaultBackoff
	}
	if ceiling <= 0 {
		ceiling = max(DefaultMaxBackoff, base)
	}
	bound := base
	for i := 1; i < n && bound < ceiling; i++ {
		bound *= 2
	}
	bound = min(bound, ceiling)
	jitter := x.Retry.Jitter
	if jitter == nil {
		jitter = func(b time.Duration) time.Duration { return rand.N(b) }
	}
	sleep := x.Retry.Sleep
	if sleep == nil {
		sleep = clock.Sleep
	}
	if err := sleep(ctx, jitter(bound)); err != nil {
		return errs.Unavailable("gave up after losing a race: %v", err)
	}
	return nil
}

func stale(ref events.AggregateRef, expected, actual uint64) error {
	return errs.Precondition("%s %q is at version %d, not the expected %d; reload and try again", ref.Type, ref.ID, actual, expected)
}

// storeErr reports a failure of the event store as unavailable, keeping
// the typed errors a store returns (a ref that does not validate, say).
func storeErr(what string, err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	return errs.Unavailable("event store: %s: %v", what, err)
}
