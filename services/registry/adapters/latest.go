package adapters

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// latestWriter writes the newest value of each machine's key to a KV bucket
// off the request path. A heartbeat or an iPXE boot used to hold one of the
// registry's command slots for a KV round trip; with 10,000 machines those
// waits held every slot and registrations were dropped (docs/performance.md).
// Now a handler hands its value to Set and answers at once; one goroutine
// publishes what is waiting asynchronously, many writes in flight, and a key
// set again before its write went out is written once, with its newest value.
//
// What is lost in a crash is at most the values of one round of writes:
// heartbeats and boot times are overwritten by the next ones anyway, and the
// replica that took them shows them at once (the handlers set its read model).
type latestWriter struct {
	bucket  string
	subject string // the bucket's subject prefix, "$KV.<bucket>."
	js      jetstream.JetStream
	// maxWaiting bounds the keys waiting to be written: past it (JetStream
	// down for long with a very large fleet) Set refuses, so memory stays
	// bounded and callers hear that the value was not kept.
	maxWaiting int

	mu      sync.Mutex
	waiting map[string][]byte
	wake    chan struct{}

	// the bucket's series, looked up once: Set runs on every heartbeat
	waitingNow               prometheus.Gauge
	written, failed, refused prometheus.Counter
	roundTime                prometheus.Observer
}

const (
	// latestInFlight is how many writes go out before their acks are awaited.
	latestInFlight = 1024
	// latestMaxWaiting is the default bound of keys waiting to be written.
	latestMaxWaiting = 1 << 20
	// latestRetryAfter spaces the rounds after one whose writes failed.
	latestRetryAfter = time.Second
	// latestFlushOnStop bounds the last round when the service stops.
	latestFlushOnStop = 5 * time.Second
)

var (
	latestWaiting = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_registry_kv_writes_waiting",
		Help: "Machine keys whose newest value (a heartbeat, an iPXE boot) waits to be written to its KV bucket, by bucket.",
	}, []string{"bucket"})
	latestWritten = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_registry_kv_writes_total",
		Help: "Values written to the heartbeat and iPXE boot KV buckets, by bucket and outcome (ok, failed: kept to be tried again, refused: too many waiting).",
	}, []string{"bucket", "outcome"})
	latestRound = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_registry_kv_write_round_seconds",
		Help:    "Time one round of asynchronous KV writes took, from the first publish to the last ack, by bucket.",
		Buckets: events.RoundTripBuckets,
	}, []string{"bucket"})
)

// newLatestWriter writes to bucket (which must exist) through nc's
// JetStream.
func newLatestWriter(js jetstream.JetStream, bucket string) (*latestWriter, error) {
	own, err := jetstream.New(js.Conn(),
		jetstream.WithPublishAsyncMaxPending(latestInFlight),
		jetstream.WithPublishAsyncTimeout(js.Options().DefaultTimeout))
	if err != nil {
		return nil, err
	}
	return &latestWriter{bucket: bucket, subject: "$KV." + bucket + ".", js: own, maxWaiting: latestMaxWaiting,
		waiting: map[string][]byte{}, wake: make(chan struct{}, 1),
		waitingNow: latestWaiting.WithLabelValues(bucket), written: latestWritten.WithLabelValues(bucket, "ok"),
		failed: latestWritten.WithLabelValues(bucket, "failed"), refused: latestWritten.WithLabelValues(bucket, "refused"),
		roundTime: latestRound.WithLabelValues(bucket)}, nil
}

// Set makes v the value to write for key. It does not wait for the write.
func (w *latestWriter) Set(key string, v []byte) error {
	w.mu.Lock()
	_, had := w.waiting[key]
	if !had && len(w.waiting) >= w.maxWaiting {
		n := len(w.waiting)
		w.mu.Unlock()
		w.refused.Inc()
		return errs.Unavailable("%d values wait to be written to %s: try again later", n, w.bucket)
	}
	w.waiting[key] = v
	n := len(w.waiting)
	w.mu.Unlock()
	w.waitingNow.Set(float64(n))
	w.poke()
	return nil
}

// Run writes what waits until ctx ends, then writes what is left, for at
// most latestFlushOnStop.
func (w *latestWriter) Run(ctx context.Context, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), latestFlushOnStop)
			defer cancel()
			if failed := w.round(stop); failed > 0 {
				log.Warn("values not written before stopping", "bucket", w.bucket, "count", failed)
			}
			return nil
		case <-w.wake:
		}
		if failed := w.round(ctx); failed > 0 {
			log.Warn("KV writes failed; trying again", "bucket", w.bucket, "count", failed, "retry_in", latestRetryAfter)
			select {
			case <-ctx.Done():
			case <-time.After(latestRetryAfter):
			}
			w.poke()
		}
	}
}

func (w *latestWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// round writes every waiting value, latestInFlight at a time, and puts back
// those whose write failed unless a newer value came meanwhile. It returns
// how many failed.
func (w *latestWriter) round(ctx context.Context) (failed int) {
	w.mu.Lock()
	batch := w.waiting
	if len(batch) == 0 {
		w.mu.Unlock()
		return 0
	}
	w.waiting = make(map[string][]byte, len(batch))
	w.mu.Unlock()
	start := time.Now()
	defer func() { w.roundTime.Observe(time.Since(start).Seconds()) }()

	type write struct {
		key string
		v   []byte
		ack jetstream.PubAckFuture // nil: the publish failed at once
	}
	window := make([]write, 0, min(len(batch), latestInFlight))
	var lost []write
	settle := func() {
		ok := 0
		for _, wr := range window {
			done := false
			if wr.ack != nil {
				select {
				case <-wr.ack.Ok():
					done = true
				case <-wr.ack.Err():
				case <-ctx.Done():
				}
			}
			if done {
				ok++
			} else {
				lost = append(lost, wr)
			}
		}
		w.written.Add(float64(ok))
		w.failed.Add(float64(len(window) - ok))
		window = window[:0]
	}
	for key, v := range batch {
		wr := write{key: key, v: v}
		if ctx.Err() == nil {
			if ack, err := w.js.PublishAsync(w.subject+key, v); err == nil {
				wr.ack = ack
			}
		}
		if window = append(window, wr); len(window) == cap(window) {
			settle()
		}
	}
	settle()

	w.mu.Lock()
	for _, wr := range lost {
		if _, newer := w.waiting[wr.key]; !newer {
			w.waiting[wr.key] = wr.v
		}
	}
	waiting := len(w.waiting)
	w.mu.Unlock()
	w.waitingNow.Set(float64(waiting))
	return len(lost)
}
