package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// HeaderEventType duplicates the envelope's type in a header so that replays
// filtered by type skip other events without decoding them.
const HeaderEventType = "Anvil-Event-Type"

// StreamOptions are the settings of the EVENTS stream that operators choose.
type StreamOptions struct {
	Replicas   int           // 1 for development, 3 in production
	Duplicates time.Duration // dedup window for Nats-Msg-Id; 0 means 2 minutes
}

// StreamConfig is the EVENTS stream's configuration: an append-only log
// that nobody can delete from or purge, and that refuses writes when full
// rather than dropping history.
func StreamConfig(o StreamOptions) jetstream.StreamConfig {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	return jetstream.StreamConfig{
		Name:        StreamName,
		Description: "anvil event log: events.<org>.<aggregate>.<id>",
		Subjects:    []string{SubjectPrefix + ".>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		DenyDelete:  true,
		DenyPurge:   true,
		Replicas:    o.Replicas,
		Duplicates:  o.Duplicates,
		// A single aggregate may hold any number of events.
		MaxMsgsPerSubject: -1,
	}
}

// EnsureStream creates the EVENTS stream, or checks that the existing one has
// the settings the log relies on. It never changes an existing stream: an
// incompatible one is reported with every difference.
func EnsureStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (jetstream.Stream, error) {
	want := StreamConfig(o)
	s, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, StreamName) // another replica created it first
		}
		if err != nil {
			return nil, fmt.Errorf("events: creating stream %s: %w", StreamName, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("events: looking up stream %s: %w", StreamName, err)
	}
	if diffs := incompatible(s.CachedInfo().Config, want); len(diffs) > 0 {
		return nil, fmt.Errorf("events: stream %s exists with incompatible settings (it was not changed): %s",
			StreamName, strings.Join(diffs, "; "))
	}
	return s, nil
}

func incompatible(have, want jetstream.StreamConfig) []string {
	var d []string
	check := func(ok bool, field string, h, w any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s is %v, want %v", field, h, w))
		}
	}
	check(len(have.Subjects) == 1 && have.Subjects[0] == want.Subjects[0], "subjects", have.Subjects, want.Subjects)
	check(have.Storage == want.Storage, "storage", have.Storage, want.Storage)
	check(have.Retention == want.Retention, "retention", have.Retention, want.Retention)
	check(have.Discard == want.Discard, "discard", have.Discard, want.Discard)
	check(have.DenyDelete, "deny_delete", have.DenyDelete, true)
	check(have.DenyPurge, "deny_purge", have.DenyPurge, true)
	check(have.Replicas == want.Replicas, "replicas", have.Replicas, want.Replicas)
	check(have.MaxAge == 0, "max_age", have.MaxAge, "unlimited")
	check(have.MaxMsgsPerSubject <= 0, "max_msgs_per_subject", have.MaxMsgsPerSubject, "unlimited")
	return d
}

// JetStreamStore is the Store on the EVENTS stream.
type JetStreamStore struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	reg    *Registry
	actor  string
	pipe   pipeline // AppendMany's publisher
	chain  chainer  // the publisher of appends of several events
	// chains: appends of several events are chained (appendChained),
	// on a stream of one replica only.
	chains bool
}

// SetDefaultActor names the actor of events appended without one in their
// context (the service itself: "service:<name>"), so that every event
// says who or what caused it. Call it before the first append.
func (s *JetStreamStore) SetDefaultActor(actor string) { s.actor = actor }

// NewJetStreamStore ensures the stream and returns a store on it.
func NewJetStreamStore(ctx context.Context, js jetstream.JetStream, reg *Registry, o StreamOptions) (*JetStreamStore, error) {
	s, err := EnsureStream(ctx, js, o)
	if err != nil {
		return nil, err
	}
	return &JetStreamStore{js: js, stream: s, reg: reg, chains: s.CachedInfo().Config.Replicas <= 1}, nil
}

// Registry returns the registry the store encodes payloads with.
func (s *JetStreamStore) Registry() *Registry { return s.reg }

func (s *JetStreamStore) Append(ctx context.Context, ref AggregateRef, expected uint64, drafts ...Draft) ([]Envelope, error) {
	op := s.beginAppend(ctx, ref, expected, drafts)
	if len(op.envs) > 1 && s.chains {
		s.appendChained(&op)
	}
	for op.pending() {
		out := outgoingPool.Get().(*outgoing)
		op.fill(&out.msg, &out.h)
		ack, err := s.js.PublishMsg(op.ctx, &out.msg)
		out.release()
		op.settle(ack, err)
	}
	return op.end()
}

// outgoing is an event's message and its headers, used again and again: a
// publish encodes the headers and copies the payload into the
// connection's buffer as it sends, and keeps the message only until it
// returns (synchronous) or until its answer comes (asynchronous: to send
// it again if no server answered).
type outgoing struct {
	msg nats.Msg
	h   headerBuilder
}

func newOutgoing() *outgoing {
	return &outgoing{h: headerBuilder{header: make(nats.Header, headerSlots)}}
}

var outgoingPool = sync.Pool{New: func() any { return newOutgoing() }}

// release hands out back to the pool, keeping none of its strings alive.
// Its header keeps its keys, their values emptied, until fillAt sets
// every slot again.
func (out *outgoing) release() {
	clear(out.h.values[:])
	out.msg = nats.Msg{}
	outgoingPool.Put(out)
}

// appendOp is one append under way, the same for Append (it waits for
// each publish) and AppendMany (it publishes asynchronously): its
// envelopes, the version its next event expects, its span and metrics.
type appendOp struct {
	s        *JetStreamStore
	ctx      context.Context // carries the append's span
	span     trace.Span
	bound    *appendBinding
	start    time.Time
	ref      AggregateRef
	subject  string
	timeText string // the envelopes' time, as its header carries it
	expected uint64
	drafts   int
	envs     []Envelope
	stored   int // envs[:stored] are in the log
	err      error
	// inFlight counts the next event's refusals while another message to
	// its subject was in flight (inFlightRefusal).
	inFlight int
}

// spanAttributes are the buffers end gives a span its attributes in.
var spanAttributes = sync.Pool{New: func() any { return new([7]attribute.KeyValue) }}

// producerSpan is the option of every append's span, made once: a
// variadic option list made per call escapes to the heap.
var producerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}

// beginAppend starts the span of an append and seals its envelopes. The
// clock is read once: the events' time is when their append began, which
// is also where its duration is measured from.
func (s *JetStreamStore) beginAppend(ctx context.Context, ref AggregateRef, expected uint64, drafts []Draft) appendOp {
	op := appendOp{s: s, ref: ref, subject: ref.Subject(), expected: expected, drafts: len(drafts),
		start: time.Now(), bound: bindingFor(ref)}
	op.ctx, op.span = tracer.Start(ctx, op.bound.spanName, producerSpan...)
	op.envs, op.err = seal(op.ctx, s.reg, ref, op.start, s.actor, drafts)
	if op.err == nil {
		op.timeText = formatHeaderTime(op.envs[0].Time)
	}
	return op
}

// pending reports whether an event is left to publish.
func (op *appendOp) pending() bool { return op.err == nil && op.stored < len(op.envs) }

// fill makes m the message of the next event, with its headers in h: its
// envelope, the stream it must land in, and the aggregate version it
// expects (the headers jetstream.WithExpectStream and
// WithExpectLastSequencePerSubject set, put in directly, as the
// envelope's Nats-Msg-Id already is).
func (op *appendOp) fill(m *nats.Msg, h *headerBuilder) { op.fillAt(op.stored, false, m, h) }

// fillAt makes m the message of event i; chained, it expects the
// stream's last message to be event i-1 instead of the aggregate's
// version (appendChained). It sets every slot of h, so that h may hold
// another message's headers.
func (op *appendOp) fillAt(i int, chained bool, m *nats.Msg, h *headerBuilder) {
	env := &op.envs[i]
	h.envelope(env, op.timeText)
	h.set(slotExpectedStream, StreamName)
	var lastID, lastSeq string
	switch {
	case chained:
		lastID = op.envs[i-1].ID
	case op.expected != Any:
		lastSeq = strconv.FormatUint(op.expected, 10)
	}
	h.set(slotExpectedLastMsgID, lastID)
	h.set(slotExpectedLastSeq, lastSeq)
	m.Subject, m.Header, m.Data = op.subject, h.header, env.Payload
}

// settle takes the answer to the next event's publish: stored, stored by
// an earlier attempt, a lost race, or an error.
func (op *appendOp) settle(ack *jetstream.PubAck, err error) {
	env := &op.envs[op.stored]
	switch {
	case err == nil:
		env.Sequence = ack.Sequence
		if op.expected != Any {
			op.expected = ack.Sequence
		}
		op.bound.appended.Inc()
		op.stored++
		op.inFlight = 0
	case inFlightRefusal(err) && op.inFlight < maxInFlightRefusals:
		// No answer on the version yet: the same event goes again once
		// the message in flight is applied (a replication round, about a
		// millisecond when the machine is not loaded), and then the
		// answer is stored or a mismatch that names the version.
		op.inFlight++
		appendInFlightRetries.Inc()
		if err := clock.Sleep(op.ctx, time.Millisecond<<(op.inFlight-1)); err != nil {
			op.err = fmt.Errorf("events: appending %s to %s: %w", env.Type, op.ref, err)
		}
	case !wrongLastSequence(err):
		op.err = fmt.Errorf("events: appending %s to %s: %w", env.Type, op.ref, err)
	default:
		// The expectation is checked before deduplication (always on a
		// single server; in a cluster once the duplicate window has
		// passed), so a retry of an append that did land looks like a
		// conflict.
		seq, found, lerr := op.s.findSince(op.ctx, op.subject, op.expected, env.ID)
		switch {
		case lerr != nil:
			// Not knowing whether the event is stored is no lost race:
			// the caller must retry the same events, not decide anew.
			op.err = fmt.Errorf("events: appending %s to %s: version %d was not current, and whether "+
				"an earlier attempt stored event %s could not be checked: %w", env.Type, op.ref, op.expected, env.ID, lerr)
		case found:
			env.Sequence, op.expected = seq, seq
			op.stored++
			op.inFlight = 0
		default:
			actual := op.s.lastSeq(op.ctx, op.subject)
			if inFlightRefusal(err) && actual == op.expected {
				// Refused all along with the aggregate where it was
				// expected: no race was lost, the same events go again.
				op.err = errs.Unavailable("events: appending %s to %s: the stream refused version %d, which is current, "+
					"%d times while another message to it was in flight", env.Type, op.ref, op.expected, op.inFlight+1)
				break
			}
			appendConflicts.Inc()
			op.err = &ConflictError{Ref: op.ref, Expected: op.expected, Actual: actual}
		}
	}
}

// inFlightRefusal is a clustered stream's refusal of an expected version
// while another message to the same subject is being replicated: the
// leader checks no expectation on a subject with a message in flight and
// answers "wrong last sequence" without a sequence (nats-server's
// expected-per-subject guard). It also answers so for a moment after it
// acknowledged that message, before it cleared the guard: a writer that
// appends again as soon as its last append is acknowledged meets it (half
// the runs of a test's 500 appends one after the other, on a loaded
// machine). That refusal says nothing about the version yet.
func inFlightRefusal(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// maxInFlightRefusals bounds the retries of one event refused while a
// message to its subject was in flight: 1+2+…+512 ms of waiting, about a
// second, for a replication round on a loaded machine. A subject still
// busy then is settled as any mismatch: stored by an earlier attempt, a
// lost race, or, when the aggregate has not moved, unavailable.
const maxInFlightRefusals = 10

func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// end records the append's outcome and returns what Append returns: the
// stored envelopes, and on failure the error.
func (op *appendOp) end() ([]Envelope, error) {
	observeAppend(op.bound, op.ref.Type, op.start, op.err)
	if op.span.IsRecording() {
		// Set in one call at the end, as each call grows the span's
		// attribute list anew, from a buffer used again: a span copies
		// the attributes it is given.
		buf := spanAttributes.Get().(*[7]attribute.KeyValue)
		attrs := append(buf[:0],
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", op.subject),
			attribute.String("anvil.org", op.ref.Org),
			attribute.Int("messaging.batch.message_count", op.drafts))
		if op.err == nil {
			attrs = append(attrs, attribute.Int64("anvil.version", int64(op.envs[len(op.envs)-1].Sequence)),
				attribute.String("anvil.event_type", op.envs[0].Type), attribute.String("anvil.event_id", op.envs[0].ID))
		}
		op.span.SetAttributes(attrs...)
		clear(buf[:])
		spanAttributes.Put(buf)
	}
	endSpan(op.span, op.err)
	if op.err != nil {
		return op.envs[:op.stored], op.err
	}
	return op.envs, nil
}

// lastSeq is the aggregate's current version, for the conflict report.
func (s *JetStreamStore) lastSeq(ctx context.Context, subject string) uint64 {
	m, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return 0
	}
	return m.Sequence
}

// findSince looks for event id among the subject's events after seq.
func (s *JetStreamStore) findSince(ctx context.Context, subject string, seq uint64, id string) (uint64, bool, error) {
	var found uint64
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1}
	err := s.readOrdered(ctx, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) (bool, error) {
		if m.Headers().Get(jetstream.MsgIDHeader) == id {
			found = meta.Sequence.Stream
			return true, nil
		}
		return false, nil
	})
	return found, found != 0, err
}

func (s *JetStreamStore) Load(ctx context.Context, ref AggregateRef) ([]Envelope, error) {
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	var out []Envelope
	err := s.Replay(ctx, Filter{Org: ref.Org, AggregateType: ref.Type, AggregateID: ref.ID}, Position{}, Position{}, func(e *Envelope) error {
		out = append(out, *e)
		return nil
	})
	return out, err
}

// clockSkew widens time-positioned replays: the consumer starts by the
// server's receive time, the envelope carries the appender's clock, and the
// two can differ by a little.
const clockSkew = time.Minute

func (s *JetStreamStore) Replay(ctx context.Context, f Filter, from, to Position, fn func(*Envelope) error) error {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if subj := f.ConsumerSubject(); subj != "" {
		cfg.FilterSubjects = []string{subj}
	}
	switch {
	case from.Seq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	case !from.Time.IsZero():
		start := from.Time.Add(-clockSkew)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	return s.readOrdered(ctx, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) (bool, error) {
		if to.Seq != 0 && meta.Sequence.Stream > to.Seq ||
			!to.Time.IsZero() && meta.Timestamp.After(to.Time.Add(clockSkew)) {
			return true, nil
		}
		if len(f.EventTypes) > 0 && !f.matchType(m.Headers().Get(HeaderEventType)) {
			return false, nil
		}
		env, err := DecodeMsg(m.Subject(), m.Headers(), m.Data(), meta.Sequence.Stream)
		if err != nil {
			return false, err
		}
		if !inRange(env, from, to) || !f.matchType(env.Type) {
			return false, nil
		}
		return false, fn(env)
	})
}

// replayInactiveThreshold is how long the server keeps a replay consumer
// whose reader stopped pulling.
const replayInactiveThreshold = 10 * time.Second

// A replay's consumer lives on one server (the stream leader, mostly):
// when that server goes away, the client notices by missed heartbeats
// (two of them) and makes the consumer again on another one. Short
// heartbeats make that seconds instead of the client's default 30.
const replayHeartbeat = 2 * time.Second

// replayIdleLimit ends a replay that has delivered nothing for this long
// while messages were pending: more than the heartbeats' detection and a
// new consumer take, so only a read that cannot go on (no server can make
// its consumer again) ends there. Every reader retries a failed replay;
// none can wait on a stuck one forever. Stopping a read waits for an
// attempt to make the consumer again that is under way (nats.go holds the
// consumer while it tries: up to its 10 s timeout and one back-off of up
// to 10 s), so such a replay ends up to 20 s after the limit. Atomic: a
// test sets it (export_test.go).
var replayIdleLimit atomic.Int64

func init() { replayIdleLimit.Store(int64(30 * time.Second)) }

// readOrdered runs an ordered consumer until it has delivered everything
// that was in the stream when it started, or visit says stop.
func (s *JetStreamStore) readOrdered(ctx context.Context, cfg jetstream.OrderedConsumerConfig,
	visit func(jetstream.Msg, *jetstream.MsgMetadata) (stop bool, err error)) error {
	// Each read makes an ephemeral consumer; the server caps consumers per
	// stream (1000 by default since nats-server 2.15), so a consumer is
	// deleted as soon as the read ends, and one whose reader died goes
	// away after a short inactivity.
	cfg.InactiveThreshold = replayInactiveThreshold
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("events: replay consumer: %w", err)
	}
	defer func() {
		if name := cons.CachedInfo().Name; name != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = s.stream.DeleteConsumer(dctx, name)
			cancel()
		}
	}()
	// The ordered consumer's Info, unlike nats.go's other JetStream calls
	// (v1.55.0), does not bound a context without a deadline: asked just
	// as the consumer's server stopped, it waited for an answer forever,
	// and so would a rollout's driver reading its log.
	ictx, cancel := s.bounded(ctx)
	info, err := cons.Info(ictx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("events: replay consumer info: %w", err)
	case err != nil:
		return errs.Unavailable("events: replay consumer info: %v", err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096), jetstream.PullHeartbeat(replayHeartbeat))
	if err != nil {
		return fmt.Errorf("events: replay: %w", err)
	}
	defer it.Stop()
	stopOnCancel := context.AfterFunc(ctx, it.Stop)
	defer stopOnCancel()
	// Next does not end while the client makes the consumer again, which
	// it tries for as long as it is not stopped: stopping it is the bound.
	// Only the waits in Next count, not the time visit takes.
	limit := time.Duration(replayIdleLimit.Load())
	var stalled atomic.Bool
	idle := time.AfterFunc(limit, func() { stalled.Store(true); it.Stop() })
	defer idle.Stop()
	pending := info.NumPending
	for {
		idle.Reset(limit)
		m, err := it.Next()
		idle.Stop()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if stalled.Load() {
				return errs.Unavailable("events: replay: nothing delivered for %s with %d events still to read (the stream's servers cannot serve the read)", limit, pending)
			}
			return fmt.Errorf("events: replay: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		pending = meta.NumPending
		stop, err := visit(m, meta)
		if err != nil || stop || meta.NumPending == 0 {
			return err
		}
	}
}

// bounded is ctx with the JetStream context's default timeout when it has
// no deadline, as nats.go bounds its own calls.
func (s *JetStreamStore) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.js.Options().DefaultTimeout)
}

func (s *JetStreamStore) Head(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
