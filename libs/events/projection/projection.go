// Package projection keeps read models up to date from the event log.
//
// A read model owns its checkpoint: Apply records the event's sequence in the
// same critical section that changes the model, so the two are stored
// together and can never disagree. The runner starts its durable consumer at
// checkpoint+1 and ignores anything at or below the checkpoint, which makes
// redelivery and duplicates harmless: nothing is lost and nothing is applied
// twice, whichever line a crash interrupts.
package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/poison"
)

// Model is a read model.
type Model interface {
	// Apply changes the model by one event and sets its checkpoint to
	// env.Sequence. payload is the decoded, upcast payload.
	Apply(env *events.Envelope, payload any) error
	// Skip sets the checkpoint to seq without changing the model, for an
	// event the model does not use or that was poisoned.
	Skip(seq uint64)
	// Checkpoint is the sequence of the last event applied or skipped.
	Checkpoint() uint64
	// Reset empties the model and sets its checkpoint to 0.
	Reset()
}

// Config describes one projection.
type Config struct {
	Name   string        // stable; names the consumer and the metrics
	Filter events.Filter // which events the model needs
	// Instance distinguishes replicas: each replica keeps its own model and
	// so needs its own consumer.
	Instance string
	// AckEvery acknowledges in batches (AckAll), which is what lets a
	// rebuild keep up with a raw read of the log.
	AckEvery int
	// Snapshots, for a model that is a Snapshotter, stores snapshots: a
	// start restores the newest and replays only the events after it.
	Snapshots *SnapshotStore
	// SnapshotEvery: once live, a snapshot is written in the background
	// after this many events (0: DefaultSnapshotEvery; negative: only
	// at SnapshotInterval).
	SnapshotEvery int
	// SnapshotInterval, if positive, also writes one at this interval
	// when events were applied since the last.
	SnapshotInterval time.Duration
	// IdleProbe: after this long without an event, the runner asks the
	// stream's leader for the stream's state, and again at this interval;
	// when it does not answer, the fetch ends and the consumer is made
	// again (0: DefaultIdleProbe; negative: never). The consumer has one
	// replica (see createConsumer): on a server cut off from the stream's
	// leader while this client stays connected to it, it would go on
	// sending heartbeats with no events, and the model would fall behind
	// without a word.
	IdleProbe time.Duration
}

// DefaultIdleProbe is Config.IdleProbe's default.
const DefaultIdleProbe = 30 * time.Second

var (
	lagGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_projection_lag_events",
		Help: "Events in the log that the projection has not applied yet.",
	}, []string{"projection"})
	checkpointGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_projection_checkpoint",
		Help: "Stream sequence of the last event the projection applied.",
	}, []string{"projection"})
	appliedCounter = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_projection_applied_total",
		Help: "Events applied by the projection.",
	}, []string{"projection"})
	lagSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "anvil_projection_lag_seconds",
		Help: "Seconds from an event's time to the moment the projection applied it, once the projection has caught up " +
			"with the log (the replay at start is not observed).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"projection"})
)

// Runner feeds one model from the log.
type Runner struct {
	cfg    Config
	js     jetstream.JetStream
	reg    *events.Registry
	model  Model
	poison *poison.Queue
	log    *slog.Logger

	rebuild chan chan error

	lagMetric, checkpointMetric interface{ Set(float64) }
	appliedInc                  func()
	lagObserver                 prometheus.Observer
	// observing mirrors live for the consuming goroutine: lags are
	// observed only once the projection has caught up, so the replay at
	// start does not count events days old as lagging.
	observing atomic.Bool

	snap *snapshotState // nil: no snapshots
	// filterOnClient: the consumer reads the whole log and handle skips
	// what the filter leaves out (see consume); the consuming goroutine's.
	filterOnClient bool
	// probeStream asks the stream's leader for the stream's state (see
	// Config.IdleProbe); a test makes it fail.
	probeStream func(context.Context, jetstream.Stream) error

	mu      sync.Mutex
	applied *sync.Cond // broadcast whenever the checkpoint moves
	lag     uint64
	live    bool // caught up at least once since start or rebuild
}

// NewRunner returns a runner; call Run to start it.
func NewRunner(cfg Config, js jetstream.JetStream, reg *events.Registry, model Model, pq *poison.Queue, log *slog.Logger) *Runner {
	if cfg.IdleProbe == 0 {
		cfg.IdleProbe = DefaultIdleProbe
	}
	if cfg.AckEvery <= 0 {
		cfg.AckEvery = 512
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{cfg: cfg, js: js, reg: reg, model: model, poison: pq, rebuild: make(chan chan error),
		log: log.With("projection", cfg.Name)}
	r.applied = sync.NewCond(&r.mu)
	r.lagMetric = lagGauge.WithLabelValues(cfg.Name)
	r.checkpointMetric = checkpointGauge.WithLabelValues(cfg.Name)
	r.appliedInc = appliedCounter.WithLabelValues(cfg.Name).Inc
	r.lagObserver = lagSeconds.WithLabelValues(cfg.Name)
	r.setUpSnapshots(model)
	return r
}

// Name is the projection's name.
func (r *Runner) Name() string { return r.cfg.Name }

func (r *Runner) consumerName() string {
	if r.cfg.Instance == "" {
		return "proj-" + r.cfg.Name
	}
	return "proj-" + r.cfg.Name + "-" + r.cfg.Instance
}

// Run applies events until ctx ends. It returns ctx's error, or the error
// that stopped it (the stream vanished, say).
func (r *Runner) Run(ctx context.Context) error {
	defer r.applied.Broadcast()
	if r.snap != nil {
		if r.model.Checkpoint() == 0 {
			r.restoreSnapshot(ctx)
		}
		var writer sync.WaitGroup
		wctx, stop := context.WithCancel(ctx)
		writer.Go(func() { r.writeSnapshots(wctx) })
		defer func() {
			stop()
			writer.Wait()
			if ctx.Err() != nil { // nothing applies events any more
				r.snapshotAtStop(ctx)
			}
		}()
	}
	for {
		done := make(chan error, 1)
		cctx, cancel := context.WithCancel(ctx)
		go func() { done <- r.consume(cctx) }()
		select {
		case err := <-done:
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil && !errors.Is(err, errRestart) {
				r.log.Error("projection stopped; restarting", "err", err)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
			}
		case reply := <-r.rebuild:
			cancel()
			<-done
			r.model.Reset()
			r.mu.Lock()
			r.live = false
			r.observing.Store(false)
			r.mu.Unlock()
			r.log.Info("rebuilding from zero")
			reply <- nil
		}
	}
}

var errRestart = errors.New("restart")

// Rebuild empties the model and replays the log from the start. It returns
// once the rebuild has begun; WaitLive waits for it to catch up.
func (r *Runner) Rebuild(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.rebuild <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runner) consume(ctx context.Context) error {
	stream, err := r.js.Stream(ctx, events.StreamName)
	if err != nil {
		return fmt.Errorf("projection %s: %w", r.cfg.Name, err)
	}
	start := r.model.Checkpoint() + 1
	var after uint64 // messages from start on (the stream has no gaps)
	if last := stream.CachedInfo().State.LastSeq; last >= start {
		after = last - start + 1
	}
	filter := r.cfg.Filter.ConsumerSubject()
	cons, info, err := r.createConsumer(ctx, stream, start, filter)
	if err != nil {
		return err
	}
	// The server finds each next message of a wildcard filter by matching
	// every subject of the message block against it, which for a filter
	// that selects most of the log (one subject per machine) made a replay
	// three times slower than reading everything: the client then skips
	// what the filter leaves out itself.
	r.filterOnClient = false
	if filter != "" && after > 0 && info.NumPending*2 >= after {
		if cons, info, err = r.createConsumer(ctx, stream, start, ""); err != nil {
			return err
		}
		r.filterOnClient = true
	}
	r.setLag(info.NumPending)
	it, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.AckEvery*4), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var received atomic.Int64 // messages so far, for the idle probe
	unanswered := r.probeWhileIdle(ctx, stream, &received, it.Stop)

	sinceAck := 0
	var last jetstream.Msg
	for {
		m, err := it.Next()
		if err != nil {
			if last != nil {
				_ = last.Ack()
			}
			select {
			case perr := <-unanswered:
				return fmt.Errorf("projection %s: no event for %s and the stream's leader does not answer from here (%w): making the consumer again", r.cfg.Name, r.cfg.IdleProbe, perr)
			default:
			}
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return err
		}
		received.Add(1)
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		r.handle(ctx, m, meta)
		if r.snap != nil {
			r.snapshotEvent()
		}
		r.setLag(meta.NumPending)
		last = m
		sinceAck++
		if sinceAck >= r.cfg.AckEvery || meta.NumPending == 0 {
			if err := m.Ack(); err != nil {
				r.log.Warn("ack failed; the consumer will redeliver, which the checkpoint makes harmless", "err", err)
			}
			sinceAck, last = 0, nil
			r.notify()
		}
	}
}

// probeWhileIdle asks the stream's leader for the stream's state each
// time a Config.IdleProbe passes without a message (received unchanged);
// the first time it does not answer, the error goes to the returned
// channel and stopFetch ends the fetch. It stops with ctx.
func (r *Runner) probeWhileIdle(ctx context.Context, stream jetstream.Stream, received *atomic.Int64, stopFetch func()) <-chan error {
	unanswered := make(chan error, 1)
	if r.cfg.IdleProbe < 0 {
		return unanswered
	}
	probe := r.probeStream
	if probe == nil {
		probe = func(ctx context.Context, s jetstream.Stream) error {
			_, err := s.Info(ctx)
			return err
		}
	}
	go func() {
		t := time.NewTicker(r.cfg.IdleProbe)
		defer t.Stop()
		seen := received.Load()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n := received.Load(); n != seen {
				seen = n
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, min(r.cfg.IdleProbe, 5*time.Second))
			err := probe(pctx, stream)
			cancel()
			if err != nil && ctx.Err() == nil {
				unanswered <- err
				stopFetch()
				return
			}
		}
	}()
	return unanswered
}

// createConsumer (re)creates the durable consumer at start: the model's
// checkpoint is the truth, not where an earlier run left off.
func (r *Runner) createConsumer(ctx context.Context, stream jetstream.Stream, start uint64, filter string) (jetstream.Consumer, *jetstream.ConsumerInfo, error) {
	name := r.consumerName()
	if err := stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil, fmt.Errorf("projection %s: resetting consumer: %w", r.cfg.Name, err)
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:           name,
		Description:       "projection " + r.cfg.Name,
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckAllPolicy,
		AckWait:           time.Minute,
		MaxAckPending:     r.cfg.AckEvery * 16,
		InactiveThreshold: time.Hour, // replicas that went away leave no consumer behind
		// The model's checkpoint, not the consumer, is the projection's
		// state, so the consumer is not replicated and lives in memory:
		// creating one answers as soon as its one server has it, where a
		// replicated one waits for its own election, which after a
		// partition or a node's restart could take longer than the
		// request's timeout again and again. If its server goes away, the
		// missed heartbeats end the fetch and a new one is made.
		Replicas:      1,
		MemoryStorage: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("projection %s: creating consumer: %w", r.cfg.Name, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cons, info, nil
}

// notify wakes WaitFor callers; called per batch, not per event.
func (r *Runner) notify() {
	r.mu.Lock()
	r.applied.Broadcast()
	r.mu.Unlock()
}

// handle applies one message. Anything that is not an applicable event goes
// to the poison queue; the projection carries on.
func (r *Runner) handle(ctx context.Context, m jetstream.Msg, meta *jetstream.MsgMetadata) {
	seq := meta.Sequence.Stream
	if seq <= r.model.Checkpoint() {
		return // redelivered or duplicate
	}
	if r.filterOnClient && !r.selects(m.Subject()) {
		r.model.Skip(seq)
		return
	}
	if t := m.Headers().Get(events.HeaderEventType); t != "" && !r.wants(t) {
		r.model.Skip(seq)
		return
	}
	env, err := events.DecodeMsg(m.Subject(), m.Headers(), m.Data(), seq)
	if err == nil && !r.wants(env.Type) {
		r.model.Skip(seq)
		return
	}
	var payload any
	if err == nil {
		payload, err = r.reg.Decode(env)
	}
	if err == nil {
		err = r.model.Apply(env, payload)
	}
	if err != nil {
		r.model.Skip(seq)
		r.log.Error("event poisoned", "seq", seq, "subject", m.Subject(), "reason", err.Error())
		if r.poison != nil {
			if perr := r.poison.Put(ctx, "projection-"+r.cfg.Name, seq, m.Subject(), m.Data(), err.Error()); perr != nil {
				r.log.Error("poison queue unavailable; the event is skipped and logged only", "seq", seq, "err", perr)
			}
		}
	} else {
		r.appliedInc()
		if r.observing.Load() {
			r.lagObserver.Observe(max(time.Since(env.Time).Seconds(), 0))
		}
	}
}

// selects reports whether the filter selects an event's subject; one that
// is not an event's goes on to be poisoned.
func (r *Runner) selects(subject string) bool {
	ref, err := events.ParseSubject(subject)
	if err != nil {
		return true
	}
	f := r.cfg.Filter
	return (f.Org == "" || f.Org == ref.Org) && (f.AggregateType == "" || f.AggregateType == ref.Type) && (f.AggregateID == "" || f.AggregateID == ref.ID)
}

func (r *Runner) wants(eventType string) bool {
	if len(r.cfg.Filter.EventTypes) == 0 {
		return true
	}
	for _, t := range r.cfg.Filter.EventTypes {
		if t == eventType {
			return true
		}
	}
	return false
}

func (r *Runner) setLag(n uint64) {
	r.lagMetric.Set(float64(n))
	r.checkpointMetric.Set(float64(r.model.Checkpoint()))
	r.mu.Lock()
	r.lag = n
	becameLive := n == 0 && !r.live
	if becameLive {
		r.live = true
		r.observing.Store(true)
		r.applied.Broadcast()
	}
	r.mu.Unlock()
	if becameLive && r.snap != nil {
		r.wakeSnapshotWriter() // for the events replayed to get here
	}
}

// Lag is the number of events not yet applied, as last reported.
func (r *Runner) Lag() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lag
}

// Live reports whether the projection has caught up since it started.
func (r *Runner) Live() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}

// WaitFor blocks until the model has applied sequence seq, so that a caller
// can read its own write. seq must be an event the projection's filter
// selects (typically the one the caller just appended).
func (r *Runner) WaitFor(ctx context.Context, seq uint64) error {
	return r.wait(ctx, func() bool { return r.model.Checkpoint() >= seq })
}

// WaitLive blocks until the projection has caught up with the log.
func (r *Runner) WaitLive(ctx context.Context) error {
	return r.wait(ctx, func() bool { return r.live })
}

func (r *Runner) wait(ctx context.Context, done func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.applied.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.applied.Wait()
	}
	return nil
}
