// Package handler runs event handlers and process managers on watermill's
// router, with its Recoverer, CorrelationID, Retry and PoisonQueue
// middlewares.
//
// Messages come from a subscriber of our own over nats.go's jetstream
// package rather than watermill-nats: its stable subscriber uses the legacy
// JetStream API and its jetstream one (beta) drains the shared connection on
// Close. Ours uses one durable pull consumer per handler, shared by the
// service's replicas, acknowledges only after the handler succeeded (or the
// event went to the poison queue), and leaves the connection alone.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/poison"
)

// Func handles one event. It must be idempotent: an event can arrive more
// than once (redelivery after a crash, retries after an error).
type Func func(ctx context.Context, env *events.Envelope, payload any) error

// permanent marks an error that retrying cannot fix.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent wraps err so the event goes to the poison queue at once.
func Permanent(err error) error { return permanent{err} }

// IsPermanent reports whether err was marked permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

const (
	metaSequence = "anvil_sequence"
	metaSubject  = "anvil_subject"
)

var tracer = otel.Tracer("github.com/anvil-fleet/anvil/libs/events/handler")

// Router is a watermill router wired for anvil's event log.
type Router struct {
	wm  *message.Router
	sub *subscriber
	reg *events.Registry
	log *slog.Logger
}

// Options tune retries; zero values take the defaults.
type Options struct {
	MaxRetries      int           // default 5
	InitialInterval time.Duration // default 100ms
	MaxInterval     time.Duration // default 5s
	AckWait         time.Duration // default 1m
}

// NewRouter returns a router whose failed events end in the poison queue.
func NewRouter(js jetstream.JetStream, reg *events.Registry, pq *poison.Queue, log *slog.Logger, o Options) (*Router, error) {
	if log == nil {
		log = slog.Default()
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 5
	}
	if o.InitialInterval == 0 {
		o.InitialInterval = 100 * time.Millisecond
	}
	if o.MaxInterval == 0 {
		o.MaxInterval = 5 * time.Second
	}
	if o.AckWait == 0 {
		o.AckWait = time.Minute
	}
	wlog := watermill.NewSlogLogger(log)
	wm, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, wlog)
	if err != nil {
		return nil, err
	}
	pqm, err := middleware.PoisonQueue(pq.Publisher(), poison.SubjectPrefix+".handlers")
	if err != nil {
		return nil, err
	}
	// Outermost first: a panic becomes an error, the correlation ID is kept,
	// retries happen, and what still fails is poisoned and acknowledged.
	wm.AddMiddleware(
		middleware.Recoverer,
		middleware.CorrelationID,
		pqm,
		middleware.Retry{
			MaxRetries:          o.MaxRetries,
			InitialInterval:     o.InitialInterval,
			MaxInterval:         o.MaxInterval,
			Multiplier:          2,
			RandomizationFactor: 0.2,
			ShouldRetry:         func(p middleware.RetryParams) bool { return !IsPermanent(p.Err) },
			Logger:              wlog,
		}.Middleware,
	)
	return &Router{wm: wm, sub: &subscriber{js: js, ackWait: o.AckWait, topics: map[string]topic{}}, reg: reg, log: log}, nil
}

// HandleOption tunes one handler.
type HandleOption func(*topic)

// KeyFunc names what an event's handling must be ordered within (a
// machine, say): events of one key are handled one at a time, in the
// order of the log.
type KeyFunc func(env *events.Envelope, payload any) string

// InParallel lets a handler take up to n events at once, never two of the
// same key, each key's in the order of the log. It is for handlers whose
// events are many and independent across keys, where handling one at a
// time (a few round trips each) bounds a rollout: the boot service
// stores each machine's reboot instruction from one consumer of every
// rollout's events. An event whose key cannot be read (it does not
// decode) is handled on its own key "" and goes to the poison queue.
func InParallel(n int, key KeyFunc) HandleOption {
	return func(t *topic) {
		if n > 1 && key != nil {
			t.parallel, t.key = n, key
		}
	}
}

// Handle registers fn under a stable name for the events filter selects.
// The name is the durable consumer's, so a restarted or scaled-out service
// continues where the last one acknowledged. Events are handled one at a
// time, in the order of the log, unless InParallel says otherwise.
func (r *Router) Handle(name string, filter events.Filter, fn Func, opts ...HandleOption) {
	t := topic{cfg: jetstream.ConsumerConfig{
		Durable:       "handler-" + name,
		Description:   "handler " + name,
		FilterSubject: filter.ConsumerSubject(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       r.sub.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 256,
	}, wants: wantsType(filter), parallel: 1}
	for _, o := range opts {
		o(&t)
	}
	t.parallel = min(t.parallel, maxParallel)
	t.pull = pullFor(t.parallel)
	t.cfg.MaxAckPending = max(t.cfg.MaxAckPending, 2*t.pull)
	if t.key != nil {
		t.decode = r.decode
	}
	r.sub.add(name, t)
	r.wm.AddConsumerHandler(name, name, r.sub, r.wrap(name, filter, fn))
}

// pullFor is how many messages a handler taking parallel events at once
// asks the server for in one pull (and keeps buffered). One at a time, 64,
// as always: what waits in the buffer waits for every event before it, and
// must not wait out the ack deadline. A parallel handler's consumer mostly
// passes over events of types it does not take (the boot service takes one
// of every fifteen events of a rollout), each a moment's work: with 64 a
// pull, under full cores each pull's round trip between the consumer and
// the server delivered only a few events it wanted, and at 10,000 machines
// the boot service's consumer of the rollouts' events fell 10,000 events
// behind (the reboot instruction stored 14.5 s after the rollout asked).
//
// What is delivered starts its ack deadline (AckWait) in the buffer, so the
// last of a window waits about pull/parallel handlings (64 one at a time,
// 8 in parallel) plus any wait for an earlier event of its key: a handler
// slower than AckWait/8 an event, all slots at once, gets events
// redelivered while they are still queued (handled twice, which handlers
// must bear anyway).
func pullFor(parallel int) int {
	return max(64, 8*parallel)
}

// maxParallel caps InParallel: events at once, and so the pull window
// (8 a slot) and the consumer's unacknowledged events (twice the window).
const maxParallel = 256

// pullHeartbeat is how often the server tells a handler's waiting pull
// that it is still there (nats.go's default is half the pull's 30 s
// expiry). After two missed heartbeats the iterator gives up on the pull
// and asks again (the server forgets the old one at its expiry), so a pull
// that went missing stops a handler for 10 s, not 30: at
// 10,000 machines the boot service's consumer of rollout events was seen
// delivered nothing for 20 s with 10,000 events waiting and none
// unacknowledged, and every machine in its reboot step waited with it.
const pullHeartbeat = 5 * time.Second

// decoded is an event the subscriber decoded to read its key, kept in the
// message's context for the handler.
type decoded struct {
	env     *events.Envelope
	payload any
	err     error
}

type decodedKey struct{}

func (r *Router) decode(subject string, h nats.Header, data []byte, seq uint64) decoded {
	env, err := events.DecodeMsg(subject, h, data, seq)
	if err != nil {
		return decoded{err: err}
	}
	payload, err := r.reg.Decode(env)
	return decoded{env: env, payload: payload, err: err}
}

// Run runs the handlers until ctx ends.
func (r *Router) Run(ctx context.Context) error { return r.wm.Run(ctx) }

// Running is closed once every handler has subscribed.
func (r *Router) Running() chan struct{} { return r.wm.Running() }

// Close stops the router.
func (r *Router) Close() error { return r.wm.Close() }

// wantsType reports whether an event of a type is one filter selects.
func wantsType(filter events.Filter) func(eventType string) bool {
	return func(t string) bool {
		if len(filter.EventTypes) == 0 {
			return true
		}
		for _, w := range filter.EventTypes {
			if w == t {
				return true
			}
		}
		return false
	}
}

func (r *Router) wrap(name string, filter events.Filter, fn Func) message.NoPublishHandlerFunc {
	wants := wantsType(filter)
	return func(msg *message.Message) error {
		seq, _ := strconv.ParseUint(msg.Metadata.Get(metaSequence), 10, 64)
		d, ok := msg.Context().Value(decodedKey{}).(decoded)
		if !ok {
			d = r.decode(msg.Metadata.Get(metaSubject), headerOf(msg.Metadata), msg.Payload, seq)
		}
		if d.env != nil && !wants(d.env.Type) {
			return nil
		}
		if d.err != nil {
			return Permanent(d.err)
		}
		env, payload := d.env, d.payload
		ctx := events.ExtractTrace(msg.Context(), env)
		ctx, span := tracer.Start(ctx, "handle "+env.Type, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("messaging.system", "nats"),
				attribute.String("anvil.handler", name),
				attribute.String("anvil.event_id", env.ID),
				attribute.Int64("anvil.sequence", int64(seq)),
			))
		defer span.End()
		ctx = events.FromEnvelope(ctx, env)
		if err := fn(ctx, env, payload); err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			r.log.WarnContext(ctx, "handler failed", "handler", name, "event", env.Type, "seq", seq, "err", err)
			return err
		}
		return nil
	}
}

// headerPrefix keeps NATS headers apart from watermill's own metadata.
const headerPrefix = "nats_"

func headerOf(md message.Metadata) nats.Header {
	h := nats.Header{}
	for k, v := range md {
		if strings.HasPrefix(k, headerPrefix) {
			h[k[len(headerPrefix):]] = []string{v}
		}
	}
	return h
}

// subscriber is the watermill Subscriber over durable JetStream consumers;
// the topic is the handler name.
type subscriber struct {
	js      jetstream.JetStream
	ackWait time.Duration
	mu      sync.Mutex
	topics  map[string]topic
}

// topic is a handler's consumer, the event types it takes, and how many
// events of different keys it handles at once.
type topic struct {
	cfg      jetstream.ConsumerConfig
	wants    func(eventType string) bool
	parallel int
	pull     int // messages asked of the server at once
	key      KeyFunc
	decode   func(subject string, h nats.Header, data []byte, seq uint64) decoded
}

// keyOf is the key of a decoded event ("" when it does not decode).
func (t topic) keyOf(d decoded) string {
	if d.err != nil {
		return ""
	}
	return t.key(d.env, d.payload)
}

func (s *subscriber) add(name string, t topic) {
	s.mu.Lock()
	s.topics[name] = t
	s.mu.Unlock()
}

func (s *subscriber) Subscribe(ctx context.Context, name string) (<-chan *message.Message, error) {
	s.mu.Lock()
	t, ok := s.topics[name]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("handler: no consumer configured for %q", name)
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, events.StreamName, t.cfg)
	if err != nil {
		return nil, fmt.Errorf("handler %s: consumer: %w", name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(t.pull), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	stop := context.AfterFunc(ctx, it.Stop)
	go func() {
		defer close(out)
		defer stop()
		// slots bounds the events being handled; busy holds, per key, the
		// channel closed when its event is settled, so that the next event
		// of that key waits for it (with one slot, each event waits for
		// the one before: the order of the log).
		slots := make(chan struct{}, max(t.parallel, 1))
		var mu sync.Mutex
		busy := map[string]chan struct{}{}
		for {
			m, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
					return
				}
				continue // heartbeats missed, reconnects: the iterator recovers
			}
			// An event of a type the handler does not take is passed over
			// with an ack that does not wait for the server: nothing was
			// done for it, so a lost ack costs a redelivery that is passed
			// over again, and the consumer does not pay a round trip for
			// each of the events it skips (the boot service takes one of
			// every fifteen events of a rollout).
			if et := m.Headers().Get(events.HeaderEventType); et != "" && !t.wants(et) {
				_ = m.Ack()
				continue
			}
			meta, err := m.Metadata()
			if err != nil {
				_ = m.Term()
				continue
			}
			seq := meta.Sequence.Stream
			wm := message.NewMessage(strconv.FormatUint(seq, 10), m.Data())
			wm.Metadata.Set(metaSequence, strconv.FormatUint(seq, 10))
			wm.Metadata.Set(metaSubject, m.Subject())
			for k, v := range m.Headers() {
				if len(v) > 0 {
					wm.Metadata.Set(headerPrefix+k, v[0])
				}
			}
			msgCtx, key := ctx, ""
			if t.key != nil {
				d := t.decode(m.Subject(), m.Headers(), m.Data(), seq)
				msgCtx, key = context.WithValue(ctx, decodedKey{}, d), t.keyOf(d)
			}
			wm.SetContext(msgCtx)
			mu.Lock()
			before := busy[key]
			mu.Unlock()
			if before != nil {
				select {
				case <-before:
				case <-ctx.Done():
					return
				}
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			settled := make(chan struct{})
			mu.Lock()
			busy[key] = settled
			mu.Unlock()
			select {
			case out <- wm:
			case <-ctx.Done():
				return
			}
			go func() {
				// The slot is free once the handler is done, the key once
				// the server has the event's ack: another key's event need
				// not wait for this one's round trip, and the next event of
				// this key (with one slot, the next event) still waits for
				// it, so a lost ack cannot bring an event back after a later
				// one of its key was handled.
				released := false
				release := func() {
					if !released {
						released = true
						<-slots
					}
				}
				defer func() {
					mu.Lock()
					if busy[key] == settled {
						delete(busy, key)
					}
					mu.Unlock()
					close(settled)
					release()
				}()
				select {
				case <-wm.Acked():
					release()
					_ = m.DoubleAck(ctx)
				case <-wm.Nacked():
					release()
					_ = m.NakWithDelay(time.Second)
				case <-ctx.Done():
					// unacknowledged: it is redelivered after AckWait
				}
			}()
		}
	}()
	return out, nil
}

func (s *subscriber) Close() error { return nil }
