package events

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// RoundTripBuckets are the duration buckets, in seconds, of what takes a
// round trip to NATS or JetStream: an append, a command, a KV write.
var RoundTripBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

var (
	appended = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_events_appended_total",
		Help: "Events appended to the log, by aggregate type.",
	}, []string{"aggregate"})
	appendConflicts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_events_append_conflicts_total",
		Help: "Appends refused because the aggregate moved on (optimistic concurrency).",
	})
	appendInFlightRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_events_append_in_flight_retries_total",
		Help: "Events sent again because a clustered stream refused their expected version while another message to the same aggregate was being replicated (a refusal that names no version).",
	})
	appendChainBreaks = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_events_append_chain_breaks_total",
		Help: "Chained appends (several events sent without waiting) whose chain broke: an event was refused because another message landed before it, and it and the rest were sent again.",
	})
	appendDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_events_append_duration_seconds",
		Help:    "Time one Append took (all its events, until JetStream acknowledged the last), by aggregate type and outcome: ok, conflict, error.",
		Buckets: RoundTripBuckets,
	}, []string{"aggregate", "outcome"})
)

// appendBinding is what every append of one aggregate type reuses: its
// span name and the metrics of its successful path, bound to their label
// values once, since hashing label values and building the name cost as
// much as the rest of an append's own work. The conflict and error
// outcomes look theirs up when they happen, so that no series appears
// before its first observation.
type appendBinding struct {
	spanName string
	appended prometheus.Counter
	ok       prometheus.Observer
}

var appendBindings sync.Map // aggregate type -> *appendBinding

// bindingFor returns the binding of ref's aggregate type. A ref that is
// not valid gets one of its own, made for the occasion: its append fails
// before anything is counted, and its type must not stay in the map.
func bindingFor(ref AggregateRef) *appendBinding {
	if b, ok := appendBindings.Load(ref.Type); ok {
		return b.(*appendBinding)
	}
	if ref.Validate() != nil {
		return &appendBinding{spanName: "append " + ref.Type}
	}
	b, _ := appendBindings.LoadOrStore(ref.Type, &appendBinding{
		spanName: "append " + ref.Type,
		appended: appended.WithLabelValues(ref.Type),
		ok:       appendDuration.WithLabelValues(ref.Type, "ok"),
	})
	return b.(*appendBinding)
}

// observeAppend records one append of aggregate type aggregate that began
// at start and ended with err.
func observeAppend(b *appendBinding, aggregate string, start time.Time, err error) {
	if err == nil {
		b.ok.Observe(time.Since(start).Seconds())
		return
	}
	outcome := "error"
	var conflict *ConflictError
	if errors.As(err, &conflict) {
		outcome = "conflict"
	}
	appendDuration.WithLabelValues(aggregate, outcome).Observe(time.Since(start).Seconds())
}
