// Package command carries commands and queries between services over NATS
// request/reply. Errors cross the wire as errs.Error, so a validation error
// raised in the registry reaches the gateway with its field names intact.
package command

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

const (
	HeaderActor       = "Anvil-Actor"
	HeaderCorrelation = "Anvil-Correlation-Id"
	// HeaderTimeout carries the time a caller still waits for the answer
	// when it sends a request, in whole milliseconds, as gRPC's
	// grpc-timeout does: relative, so the hosts' clocks need not agree.
	// The server counts it from when the request reaches it, drops the
	// request unhandled and unanswered if its handler has not started by
	// then (all slots busy), and gives the handler that deadline. A request
	// without it (or with a value that is not a positive integer) has no
	// deadline and waits for a slot as long as it takes.
	HeaderTimeout = "Anvil-Timeout"
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 10 * time.Second
)

// reply is the wire form of every answer: {"result": …} or {"error": …},
// never both. A success is written as exactly `{"result":` + the result's
// JSON + `}`, which lets CallJSON take the result's bytes without decoding.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *errs.Error     `json:"error,omitempty"`
}

const resultPrefix = `{"result":`

// JSON is a result that is already encoded: a handler that returns it (as
// its response type, Handle[Req, JSON]) has these bytes sent as the result
// verbatim, neither encoded nor validated again. It must be exactly one
// valid JSON value; an empty JSON is sent as no result (the caller's zero
// value). Callers decode it as they would the value it encodes, so a
// handler can switch from a Go value to its pre-encoded bytes (as the
// registry's machine reads do) without its callers noticing.
type JSON []byte

// MarshalJSON makes a JSON embedded in another result encode as itself.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

var (
	tracer  = otel.Tracer("github.com/anvil-fleet/anvil/libs/events/command")
	handled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_commands_handled_total",
		Help: "Commands and queries served, by subject and outcome kind.",
	}, []string{"subject", "outcome"})
	// durationBuckets are the command latency buckets, in seconds.
	durationBuckets = events.RoundTripBuckets
	handleDuration  = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_command_handle_duration_seconds",
		Help:    "Time a server took to handle a command or query (decode, handler, reply), by subject and outcome: ok or the error kind.",
		Buckets: durationBuckets,
	}, []string{"subject", "outcome"})
	waitingRequests = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_command_requests_waiting",
		Help: "Requests with a deadline waiting for one of a server's handler slots (all busy), by queue group; past WaitingPerSlot per slot a request is answered busy.",
	}, []string{"queue"})
	requestDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_command_request_duration_seconds",
		Help:    "Time a caller waited for the answer to a command or query (the round trip over NATS), by subject and outcome: ok or the error kind (unavailable for no responder or a timeout).",
		Buckets: durationBuckets,
	}, []string{"subject", "outcome"})
)

// outcomeOf is the outcome label of err: "ok" or its error kind.
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return string(errs.KindOf(err))
}

// Server serves commands on one connection with bounded concurrency.
type Server struct {
	nc    *nats.Conn
	queue string
	log   *slog.Logger
	slots chan struct{}
	subs  []*nats.Subscription
	// Requests with a deadline wait for a slot each on its own goroutine,
	// at most maxWaiting per subject (a flood of one kind of request makes
	// only that kind busy); closing ends their wait when the server closes.
	waitingNow prometheus.Gauge
	maxWaiting int64
	closing    chan struct{}
	closeOnce  sync.Once
}

// WaitingPerSlot is how many requests of one subject may wait for a slot,
// per slot: past that a request is answered "busy" at once (unavailable,
// with a RetryAfter of busyRetryAfter seconds), as a wait that long would
// mostly outlast its caller.
const WaitingPerSlot = 16

const busyRetryAfter = 1

// NewServer returns a server whose handlers join queue group queue, so that
// replicas share the work, running at most concurrency handlers at once.
func NewServer(nc *nats.Conn, queue string, concurrency int, log *slog.Logger) *Server {
	if concurrency <= 0 {
		concurrency = 64
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{nc: nc, queue: queue, log: log, slots: make(chan struct{}, concurrency),
		maxWaiting: int64(concurrency) * WaitingPerSlot, closing: make(chan struct{}), waitingNow: waitingRequests.WithLabelValues(queue)}
}

// Handle serves fn on subject. Requests are decoded strictly: an unknown
// field or a wrong type is a validation error naming the field.
func Handle[Req, Resp any](s *Server, subject string, fn func(ctx context.Context, req Req) (Resp, error)) error {
	return s.subscribe(subject, func(ctx context.Context, data []byte) (any, error) {
		var req Req
		if err := Decode(data, &req); err != nil {
			return nil, err
		}
		return fn(ctx, req)
	})
}

// subscribe serves fn on subject in the server's queue group, at most
// concurrency at once. A request with a deadline that finds every slot
// taken waits for one on its own goroutine, so that the subscription takes
// the next request at once and each deadline counts from the request's
// arrival: it is dropped when its deadline passes first, and answered
// "busy" when too many wait already. A request without a deadline (an old
// caller's) holds the subscription until a slot frees, as it always did.
func (s *Server) subscribe(subject string, fn func(context.Context, []byte) (any, error)) error {
	var waiting atomic.Int64 // this subject's requests waiting for a slot
	run := func(m *nats.Msg, deadline time.Time) {
		defer func() { <-s.slots }()
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			s.expired(subject, deadline, "before it was handled")
			return
		}
		s.serve(m, subject, fn, deadline)
	}
	sub, err := s.nc.QueueSubscribe(subject, s.queue, func(m *nats.Msg) {
		deadline := deadlineOf(m)
		select {
		case s.slots <- struct{}{}:
			go run(m, deadline)
			return
		default:
		}
		if deadline.IsZero() {
			s.slots <- struct{}{}
			go run(m, deadline)
			return
		}
		if n := waiting.Add(1); n > s.maxWaiting {
			waiting.Add(-1)
			s.busy(m, subject, n-1)
			return
		}
		s.waitingNow.Inc()
		go func() {
			defer func() { waiting.Add(-1); s.waitingNow.Dec() }()
			if !s.acquire(deadline) {
				select {
				case <-s.closing:
					s.refuse(m, subject, "stopping", errs.Unavailable("%s: the service is stopping; try again", subject))
				default:
					s.expired(subject, deadline, "while waiting for a slot")
				}
				return
			}
			run(m, deadline)
		}()
	})
	if err != nil {
		return fmt.Errorf("command: subscribing to %s: %w", subject, err)
	}
	s.subs = append(s.subs, sub)
	// The server has the subscription once it answers a ping: a service
	// that reports ready after registering its handlers is then really
	// answering, and a first request does not meet "no responders". A
	// failed flush (a reconnect under way) is not fatal: the client sends
	// its subscriptions again when it reconnects.
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		s.log.Warn("command: the server has not confirmed a subscription yet", "subject", subject, "err", err)
	}
	return nil
}

// deadlineOf is the deadline of request m, received now: now plus its
// HeaderTimeout, or the zero time for none.
func deadlineOf(m *nats.Msg) time.Time {
	if m.Header == nil {
		return time.Time{}
	}
	v := m.Header.Get(HeaderTimeout)
	if v == "" {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(maxTimeout/time.Millisecond) {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(ms) * time.Millisecond)
}

// maxTimeout is the longest HeaderTimeout taken as a deadline; a longer
// one (which would overflow a time.Duration) is as good as none.
const maxTimeout = 100 * 365 * 24 * time.Hour

// acquire takes a slot, waiting until one frees, deadline passes or the
// server closes. It reports whether it got the slot.
func (s *Server) acquire(deadline time.Time) bool {
	wait := time.Until(deadline)
	if wait <= 0 {
		return false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case s.slots <- struct{}{}:
		return true
	case <-timer.C:
		return false
	case <-s.closing:
		return false
	}
}

// busy answers a request that found every slot taken and too many
// requests waiting: unavailable, so that its caller tries again later
// (the boot service's firmware, an agent) instead of waiting in a queue
// that would outlast it.
func (s *Server) busy(m *nats.Msg, subject string, waiting int64) {
	e := errs.Unavailable("%s is busy: %d handlers run and %d such requests wait; try again shortly", subject, cap(s.slots), waiting)
	e.RetryAfter = busyRetryAfter
	s.refuse(m, subject, "busy", e)
}

// refuse answers a request that is not handled with err, counted under
// outcome.
func (s *Server) refuse(m *nats.Msg, subject, outcome string, err *errs.Error) {
	handled.WithLabelValues(subject, outcome).Inc()
	body, _ := json.Marshal(reply{Error: err})
	s.respond(context.Background(), m, subject, body)
}

// expired accounts for a request dropped unhandled because its caller's
// deadline passed: the caller has given up, so it gets no reply.
func (s *Server) expired(subject string, deadline time.Time, when string) {
	handled.WithLabelValues(subject, "expired").Inc()
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // spare the arguments under overload
		s.log.Debug("command dropped unhandled: its caller's deadline passed", "subject", subject, "when", when, "late", time.Since(deadline))
	}
}

// HandleAppend serves fn on subject, where fn appends its result, already
// encoded as JSON, to dst and returns the extended slice (or an error),
// as Handle[Req, JSON] would send it. dst is a pooled buffer that already
// holds the reply's framing, so an answer made of cached bytes (a page of
// machines) is copied once and allocates nothing; fn must not keep dst.
// Appending nothing sends no result.
func HandleAppend[Req any](s *Server, subject string, fn func(ctx context.Context, req Req, dst []byte) ([]byte, error)) error {
	return s.subscribe(subject, func(ctx context.Context, data []byte) (any, error) {
		var req Req
		if err := Decode(data, &req); err != nil {
			return nil, err
		}
		buf := getBuffer()
		b, err := fn(ctx, req, append((*buf)[:0], resultPrefix...))
		if err != nil {
			putBuffer(buf)
			return nil, err
		}
		if len(b) == len(resultPrefix) { // no result
			b = append(b[:0], "{}"...)
		} else {
			b = append(b, '}')
		}
		*buf = b
		return framed{buf}, nil
	})
}

// framed is a whole success reply in a pooled buffer.
type framed struct{ buf *[]byte }

// buffers holds reply buffers: a reply is copied into the connection's
// buffer by Respond, so its own buffer can be used again at once.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= 4<<20 { // keep no giant
		buffers.Put(b)
	}
}

// Close stops taking requests and waits for running handlers to finish.
func (s *Server) Close() {
	for _, sub := range s.subs {
		_ = sub.Drain()
	}
	s.closeOnce.Do(func() { close(s.closing) }) // requests still waiting for a slot give up
	for range cap(s.slots) {
		s.slots <- struct{}{}
	}
}

// serve handles request m; a non-zero deadline is its handler's.
func (s *Server) serve(m *nats.Msg, subject string, fn func(context.Context, []byte) (any, error), deadline time.Time) {
	start, outcome := time.Now(), "ok"
	defer func() { handleDuration.WithLabelValues(subject, outcome).Observe(time.Since(start).Seconds()) }()
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if m.Header != nil {
		ctx = otel.GetTextMapPropagator().Extract(ctx, events.HeaderCarrier(m.Header))
		if a := m.Header.Get(HeaderActor); a != "" {
			ctx = events.WithActor(ctx, a)
		}
		if c := m.Header.Get(HeaderCorrelation); c != "" {
			ctx = events.WithCorrelation(ctx, c)
		}
	}
	ctx, span := tracer.Start(ctx, "handle "+subject, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject)))
	defer span.End()

	result, err := func() (res any, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.ErrorContext(ctx, "command handler panicked", "subject", subject, "panic", p, "stack", string(debug.Stack()))
				err = errs.Internal("internal error while handling %s", subject)
			}
		}()
		return fn(ctx, m.Data)
	}()
	if err == nil {
		switch r := result.(type) {
		case framed: // the whole reply, made by HandleAppend
			handled.WithLabelValues(subject, "ok").Inc()
			s.respond(ctx, m, subject, *r.buf)
			putBuffer(r.buf)
			return
		case JSON: // framed as json.Marshal(reply{Result: r}) would, without scanning r
			handled.WithLabelValues(subject, "ok").Inc()
			if len(r) == 0 {
				s.respond(ctx, m, subject, []byte("{}"))
				return
			}
			buf := getBuffer()
			*buf = append(append(append((*buf)[:0], resultPrefix...), r...), '}')
			s.respond(ctx, m, subject, *buf)
			putBuffer(buf)
			return
		}
	}
	var rep reply
	if err != nil {
		rep.Error = errs.As(err)
		if rep.Error.Kind == errs.KindInternal && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			// The caller's deadline passed while the handler ran: the
			// caller has given up, which is no internal error.
			handled.WithLabelValues(subject, "expired").Inc()
			outcome = "expired"
			s.respond(ctx, m, subject, expiredReply)
			return
		}
		if rep.Error.Kind == errs.KindInternal {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			s.log.ErrorContext(ctx, "command failed", "subject", subject, "err", err)
		}
		outcome = string(rep.Error.Kind)
		handled.WithLabelValues(subject, outcome).Inc()
	} else {
		rep.Result, err = json.Marshal(result)
		if err != nil {
			rep.Error = errs.Internal("encoding the result of %s: %v", subject, err)
		}
		handled.WithLabelValues(subject, "ok").Inc()
	}
	body, _ := json.Marshal(rep)
	s.respond(ctx, m, subject, body)
}

// expiredReply answers a request whose caller's deadline passed while its
// handler ran, in case the caller still listens.
var expiredReply, _ = json.Marshal(reply{Error: errs.Unavailable("the caller's deadline passed while the request was handled")})

// respond sends body as the reply to m, if m wants one. The connection
// copies body before Respond returns. A reply larger than compressAbove
// goes gzipped to a caller that takes it (HeaderAcceptEncoding): a
// rollout of 10,000 machines is several MiB of JSON, more than the
// message size NATS allows (1 MiB by default), and about a tenth of it
// compressed. A reply NATS cannot carry even so is answered with an
// error that says so, rather than left for the caller to time out on.
func (s *Server) respond(ctx context.Context, m *nats.Msg, subject string, body []byte) {
	if m.Reply == "" {
		return
	}
	var err error
	if len(body) > compressAbove && m.Header.Get(HeaderAcceptEncoding) == encodingGzip {
		err = respondGzipped(m, body)
	} else {
		err = m.Respond(body)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		tooLarge, _ := json.Marshal(reply{Error: errs.Internal(
			"the reply of %s is %d bytes, more than NATS carries in one message; ask for less (a page, a filter)", subject, len(body))})
		err = m.Respond(tooLarge)
	}
	if err != nil {
		s.log.WarnContext(ctx, "reply not sent", "subject", subject, "err", err)
	}
}

const (
	// HeaderAcceptEncoding: the caller takes a gzipped reply.
	HeaderAcceptEncoding = "Anvil-Accept-Encoding"
	// HeaderEncoding: the reply is gzipped.
	HeaderEncoding = "Anvil-Encoding"
	encodingGzip   = "gzip"
	// compressAbove is the reply size from which replies are gzipped:
	// smaller ones cost more to compress than to carry.
	compressAbove = 256 << 10
	// maxInflated bounds a gzipped reply's size once inflated, so that
	// a reply cannot make its caller allocate without limit.
	maxInflated = 256 << 20
)

func respondGzipped(m *nats.Msg, body []byte) error {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	if _, err := zw.Write(body); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return m.RespondMsg(&nats.Msg{Data: b.Bytes(), Header: nats.Header{HeaderEncoding: []string{encodingGzip}}})
}

// inflate returns a reply's body, gunzipped if it came gzipped.
func inflate(resp *nats.Msg) ([]byte, error) {
	if resp.Header.Get(HeaderEncoding) != encodingGzip {
		return resp.Data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(resp.Data))
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxInflated+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxInflated {
		return nil, fmt.Errorf("more than %d bytes inflated", maxInflated)
	}
	return data, nil
}

// Call sends req to subject and decodes the answer into Resp. A refusal
// comes back as the *errs.Error the handler returned.
func Call[Req, Resp any](ctx context.Context, nc *nats.Conn, subject string, req Req) (Resp, error) {
	var zero Resp
	ctx, span := tracer.Start(ctx, "call "+subject, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject)))
	defer span.End()
	result, err := call(ctx, span, nc, subject, req)
	if err != nil {
		return zero, err
	}
	if len(result) > 0 {
		if err := json.Unmarshal(result, &zero); err != nil {
			return zero, errs.Internal("decoding the result of %s: %v", subject, err)
		}
	}
	return zero, nil
}

// CallJSON is Call without decoding the result: it returns the result's
// JSON as the handler's server sent it (nil when there is none), for a
// caller that passes it on as it is. The bytes are the caller's own. A
// refusal comes back as the *errs.Error the handler returned, as with Call.
func CallJSON[Req any](ctx context.Context, nc *nats.Conn, subject string, req Req) (JSON, error) {
	ctx, span := tracer.Start(ctx, "call "+subject, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject)))
	defer span.End()
	result, err := call(ctx, span, nc, subject, req)
	if err != nil || len(result) == 0 {
		return nil, err
	}
	return JSON(result), nil
}

// call sends req and returns the raw result of the reply.
func call[Req any](ctx context.Context, span trace.Span, nc *nats.Conn, subject string, req Req) (_ []byte, err error) {
	start := time.Now()
	defer func() { requestDuration.WithLabelValues(subject, outcomeOf(err)).Observe(time.Since(start).Seconds()) }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, errs.Internal("encoding %s request: %v", subject, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	otel.GetTextMapPropagator().Inject(ctx, events.HeaderCarrier(msg.Header))
	if a := events.Actor(ctx); a != "" {
		msg.Header.Set(HeaderActor, a)
	}
	if c := events.Correlation(ctx); c != "" {
		msg.Header.Set(HeaderCorrelation, c)
	}
	deadline, _ := ctx.Deadline() // there is one: DefaultTimeout at the latest
	msg.Header.Set(HeaderTimeout, strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10))
	msg.Header.Set(HeaderAcceptEncoding, encodingGzip)
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, noResponder{err: errs.Unavailable("no service answers %s", subject)}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return nil, errs.Unavailable("%s did not answer in time", subject)
		default:
			return nil, errs.Unavailable("%s: %v", subject, err)
		}
	}
	body, err := inflate(resp)
	if err != nil {
		return nil, errs.Internal("%s answered with a gzipped reply that does not inflate: %v", subject, err)
	}
	if result, ok := resultOf(body); ok {
		return result, nil
	}
	var rep reply
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, errs.Internal("%s answered with something that is not a reply: %v", subject, err)
	}
	if rep.Error != nil {
		if rep.Error.Kind == errs.KindInternal {
			span.SetStatus(codes.Error, rep.Error.Message)
		}
		return nil, rep.Error
	}
	return rep.Result, nil
}

// resultOf takes the result out of a success as Server writes it,
// `{"result":` + value + `}`, without scanning the value; anything else
// (an error, an empty reply, other spacing) is left to the decoder. The
// slice's capacity ends with the value, so appending to it copies.
func resultOf(data []byte) ([]byte, bool) {
	n := len(data)
	if n <= len(resultPrefix)+1 || string(data[:len(resultPrefix)]) != resultPrefix || data[n-1] != '}' {
		return nil, false
	}
	return data[len(resultPrefix) : n-1 : n-1], true
}

// Decode parses JSON strictly into v, turning decoder complaints into
// validation errors that name the field.
//
// It is the one decoder of everything that crosses an edge (HTTP bodies,
// NATS requests): beyond encoding/json, it refuses data after the value
// (`{"a":1}}`), a key given twice, a key that matches a field only when
// case is ignored, and it names the field of a value that a type's own
// decoder refuses (a time that is not RFC 3339).
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// A field whose own decoder failed is named by the strict walk.
		if serr := checkStrict(data, reflect.TypeOf(v)); serr != nil {
			return jsonError(serr)
		}
		return jsonError(err)
	}
	if rest := bytes.TrimSpace(data[dec.InputOffset():]); len(rest) > 0 {
		return errs.Invalid("body", "must hold exactly one JSON value; %s follows it", clip(rest))
	}
	if err := checkStrict(data, reflect.TypeOf(v)); err != nil {
		return jsonError(err)
	}
	return nil
}

func jsonError(err error) error {
	if errs.Is(err, errs.KindValidation) {
		return err
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return errs.Invalid(field, "must be %s, not %s", typeErr.Type.String(), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return errs.Invalid("body", "is not valid JSON at offset %d: %v", syntaxErr.Offset, syntaxErr)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return errs.Invalid(name, "is not a known field")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return errs.Invalid("body", "is empty or truncated")
	default:
		return errs.Invalid("body", "%v", err)
	}
}

// noResponder is the error of a call that no service answered: an
// unavailable errs.Error that IsNoResponder tells from a call that timed
// out or failed otherwise.
type noResponder struct{ err *errs.Error }

func (e noResponder) Error() string   { return e.err.Error() }
func (e noResponder) Unwrap() []error { return []error{e.err, nats.ErrNoResponders} }

// IsNoResponder reports whether a call failed because no service serves
// its subject (none running, or none that knows the subject yet), rather
// than because one did not answer in time.
func IsNoResponder(err error) bool { return errors.Is(err, nats.ErrNoResponders) }
