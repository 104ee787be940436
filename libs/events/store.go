package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// Store is the seam between services and the log. The JetStream store is the
// real one; the memory store serves unit tests of pure logic.
type Store interface {
	// Append stores events on the aggregate if its version is still
	// expected (0: the aggregate must not exist yet; Any: no check). It
	// returns the stored envelopes with their sequences. A version mismatch
	// is a *ConflictError.
	Append(ctx context.Context, ref AggregateRef, expected uint64, drafts ...Draft) ([]Envelope, error)
	// Load returns every event of one aggregate, oldest first. The last
	// one's Sequence is the aggregate's version.
	Load(ctx context.Context, ref AggregateRef) ([]Envelope, error)
	// Replay calls fn for every event matching f between from and to (both
	// inclusive; a zero Position is unbounded), in log order.
	Replay(ctx context.Context, f Filter, from, to Position, fn func(*Envelope) error) error
	// Head returns the sequence of the newest event in the log.
	Head(ctx context.Context) (uint64, error)
}

// Any disables the optimistic concurrency check of an append.
const Any = ^uint64(0)

// Draft is an event about to be appended. ID may be set by a caller that
// retries, so that the log stores the event once; otherwise a UUIDv7 is made.
type Draft struct {
	ID      string
	Payload Payload
}

// New wraps payloads as drafts with fresh IDs.
func New(payloads ...Payload) []Draft {
	d := make([]Draft, len(payloads))
	for i, p := range payloads {
		d[i] = Draft{Payload: p}
	}
	return d
}

// Filter narrows a replay. Empty fields match everything.
type Filter struct {
	Org           string
	AggregateType string
	AggregateID   string
	EventTypes    []string
}

// ConsumerSubject is the subject filter for a consumer of f, or "" for the
// whole stream: an all-wildcard filter makes the server match every
// message's subject, which costs more than reading them all.
func (f Filter) ConsumerSubject() string {
	if f.Org == "" && f.AggregateType == "" && f.AggregateID == "" {
		return ""
	}
	return FilterSubject(f.Org, f.AggregateType, f.AggregateID)
}

func (f Filter) matchType(t string) bool {
	if len(f.EventTypes) == 0 {
		return true
	}
	for _, want := range f.EventTypes {
		if want == t {
			return true
		}
	}
	return false
}

// Position is a point in the log: a stream sequence or an instant.
type Position struct {
	Seq  uint64
	Time time.Time
}

// AtSeq is the position of stream sequence n.
func AtSeq(n uint64) Position { return Position{Seq: n} }

// AtTime is the position of instant t.
func AtTime(t time.Time) Position { return Position{Time: t} }

func (p Position) IsZero() bool { return p.Seq == 0 && p.Time.IsZero() }

// ParseAt reads an "as of" position given by a user: a stream sequence or
// an RFC 3339 time. A malformed one is a validation error on field "at".
func ParseAt(at string) (Position, error) {
	if n, err := strconv.ParseUint(at, 10, 64); err == nil && n > 0 {
		return AtSeq(n), nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return Position{}, errs.Invalid("at", "must be a stream sequence (a positive integer) or an RFC 3339 time, not %q", at)
	}
	return AtTime(t), nil
}

// ConflictError says that an append lost an optimistic-concurrency race.
type ConflictError struct {
	Ref      AggregateRef
	Expected uint64
	Actual   uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("aggregate %s is at version %d, not the expected %d", e.Ref, e.Actual, e.Expected)
}

// Is makes a ConflictError match errs' conflict kind as well.
func (e *ConflictError) Is(target error) bool {
	t, ok := target.(*errs.Error)
	return ok && t.Kind == errs.KindConflict && t.Message == ""
}

// Version returns the aggregate version after the given events (0 if none).
func Version(envs []Envelope) uint64 {
	if len(envs) == 0 {
		return 0
	}
	return envs[len(envs)-1].Sequence
}

var tracer = otel.Tracer("github.com/anvil-fleet/anvil/libs/events")

// Event IDs draw from a pool of random bytes rather than one getrandom
// call each; appends are on every command's path.
func init() { uuid.EnableRandPool() }

// seal builds the envelopes for an append from ctx and the drafts.
// defaultActor is the actor of events appended without one in ctx.
func seal(ctx context.Context, reg *Registry, ref AggregateRef, now time.Time, defaultActor string, drafts []Draft) ([]Envelope, error) {
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	if len(drafts) == 0 {
		return nil, errs.Invalid("events", "an append needs at least one event")
	}
	var trace lazyMapCarrier
	otel.GetTextMapPropagator().Inject(ctx, &trace)
	corr := Correlation(ctx)
	actor := Actor(ctx)
	if actor == "" {
		actor = defaultActor
	}
	out := make([]Envelope, len(drafts))
	for i, d := range drafts {
		if d.Payload == nil {
			return nil, errs.Invalid(fmt.Sprintf("events[%d]", i), "payload is nil")
		}
		name, version, err := reg.versionOf(d.Payload)
		if err != nil {
			return nil, err
		}
		body, err := json.Marshal(d.Payload)
		if err != nil {
			return nil, fmt.Errorf("events: encoding %s: %w", name, err)
		}
		id := d.ID
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			id = u.String()
		}
		if corr == "" {
			corr = id // the first event of a chain correlates everything after it
		}
		out[i] = Envelope{
			ID: id, Type: name, SchemaVersion: version,
			Org: ref.Org, AggregateType: ref.Type, AggregateID: ref.ID,
			Time: now.UTC(), Actor: actor, CorrelationID: corr, CausationID: Causation(ctx),
			Trace: trace.m, Payload: body,
		}
	}
	return out, nil
}

// lazyMapCarrier is a MapCarrier made only once a propagator sets a
// value: without tracing, an append allocates no trace map.
type lazyMapCarrier struct{ m map[string]string }

func (c *lazyMapCarrier) Get(key string) string { return MapCarrier(c.m).Get(key) }
func (c *lazyMapCarrier) Keys() []string        { return MapCarrier(c.m).Keys() }
func (c *lazyMapCarrier) Set(key, value string) {
	if c.m == nil {
		c.m = make(map[string]string, 2) // traceparent, and rarely tracestate
	}
	MapCarrier(c.m).Set(key, value)
}

// ExtractTrace returns ctx continuing the trace recorded in env.
func ExtractTrace(ctx context.Context, env *Envelope) context.Context {
	if len(env.Trace) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, MapCarrier(env.Trace))
}

// SpanLinkOf returns a link to the span that produced env, for consumers that
// start a new trace rather than continue it.
func SpanLinkOf(env *Envelope) trace.Link {
	ctx := propagation.TraceContext{}.Extract(context.Background(), MapCarrier(env.Trace))
	return trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}
}
