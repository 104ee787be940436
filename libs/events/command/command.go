// Package command carries commands and queries between services over NATS
// request/reply. Errors cross the wire as errs.Error, so a validation error
// raised in the registry reaches the gateway with its field names intact.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
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
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 10 * time.Second
)

// reply is the wire form of every answer.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *errs.Error     `json:"error,omitempty"`
}

var (
	tracer  = otel.Tracer("github.com/anvil-fleet/anvil/libs/events/command")
	handled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_commands_handled_total",
		Help: "Commands and queries served, by subject and outcome kind.",
	}, []string{"subject", "outcome"})
)

// Server serves commands on one connection with bounded concurrency.
type Server struct {
	nc    *nats.Conn
	queue string
	log   *slog.Logger
	slots chan struct{}
	subs  []*nats.Subscription
}

// NewServer returns a server whose handlers join queue group queue, so that
// replicas share the work, running at most concurrency handlers at once.
func NewServer(nc *nats.Conn, queue string, concurrency int, log *slog.Logger) *Server {
	if concurrency <= 0 {
		concurrency = 64
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{nc: nc, queue: queue, log: log, slots: make(chan struct{}, concurrency)}
}

// Handle serves fn on subject. Requests are decoded strictly: an unknown
// field or a wrong type is a validation error naming the field.
func Handle[Req, Resp any](s *Server, subject string, fn func(ctx context.Context, req Req) (Resp, error)) error {
	sub, err := s.nc.QueueSubscribe(subject, s.queue, func(m *nats.Msg) {
		s.slots <- struct{}{}
		go func() {
			defer func() { <-s.slots }()
			s.serve(m, subject, func(ctx context.Context, data []byte) (any, error) {
				var req Req
				if err := Decode(data, &req); err != nil {
					return nil, err
				}
				return fn(ctx, req)
			})
		}()
	})
	if err != nil {
		return fmt.Errorf("command: subscribing to %s: %w", subject, err)
	}
	s.subs = append(s.subs, sub)
	return nil
}

// Close stops taking requests and waits for running handlers to finish.
func (s *Server) Close() {
	for _, sub := range s.subs {
		_ = sub.Drain()
	}
	for range cap(s.slots) {
		s.slots <- struct{}{}
	}
}

func (s *Server) serve(m *nats.Msg, subject string, fn func(context.Context, []byte) (any, error)) {
	ctx := context.Background()
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
	var rep reply
	if err != nil {
		rep.Error = errs.As(err)
		if rep.Error.Kind == errs.KindInternal {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			s.log.ErrorContext(ctx, "command failed", "subject", subject, "err", err)
		}
		handled.WithLabelValues(subject, string(rep.Error.Kind)).Inc()
	} else {
		rep.Result, err = json.Marshal(result)
		if err != nil {
			rep.Error = errs.Internal("encoding the result of %s: %v", subject, err)
		}
		handled.WithLabelValues(subject, "ok").Inc()
	}
	body, _ := json.Marshal(rep)
	if m.Reply == "" {
		return
	}
	if err := m.Respond(body); err != nil {
		s.log.WarnContext(ctx, "reply not sent", "subject", subject, "err", err)
	}
}

// Call sends req to subject and decodes the answer into Resp. A refusal
// comes back as the *errs.Error the handler returned.
func Call[Req, Resp any](ctx context.Context, nc *nats.Conn, subject string, req Req) (Resp, error) {
	var zero Resp
	ctx, span := tracer.Start(ctx, "call "+subject, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject)))
	defer span.End()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return zero, errs.Internal("encoding %s request: %v", subject, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	otel.GetTextMapPropagator().Inject(ctx, events.HeaderCarrier(msg.Header))
	if a := events.Actor(ctx); a != "" {
		msg.Header.Set(HeaderActor, a)
	}
	if c := events.Correlation(ctx); c != "" {
		msg.Header.Set(HeaderCorrelation, c)
	}
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return zero, errs.Unavailable("no service answers %s", subject)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return zero, errs.Unavailable("%s did not answer in time", subject)
		default:
			return zero, errs.Unavailable("%s: %v", subject, err)
		}
	}
	var rep reply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		return zero, errs.Internal("%s answered with something that is not a reply: %v", subject, err)
	}
	if rep.Error != nil {
		if rep.Error.Kind == errs.KindInternal {
			span.SetStatus(codes.Error, rep.Error.Message)
		}
		return zero, rep.Error
	}
	if len(rep.Result) > 0 {
		if err := json.Unmarshal(rep.Result, &zero); err != nil {
			return zero, errs.Internal("decoding the result of %s: %v", subject, err)
		}
	}
	return zero, nil
}

// Decode parses JSON strictly into v, turning decoder complaints into
// validation errors that name the field.
func Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return errs.Invalid("body", "must hold exactly one JSON value")
	}
	return nil
}

func jsonError(err error) error {
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
