package events

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	appended = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_events_appended_total",
		Help: "Events appended to the log, by aggregate type.",
	}, []string{"aggregate"})
	appendConflicts = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_events_append_conflicts_total",
		Help: "Appends refused because the aggregate moved on (optimistic concurrency).",
	})
	appendDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_events_append_duration_seconds",
		Help:    "Time one Append took (all its events, until JetStream acknowledged the last), by aggregate type and outcome: ok, conflict, error.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"aggregate", "outcome"})
)

// observeAppend records one Append of aggregate type aggregate that began
// at start and ended with *err.
func observeAppend(aggregate string, start time.Time, err *error) {
	outcome := "ok"
	var conflict *ConflictError
	switch {
	case errors.As(*err, &conflict):
		outcome = "conflict"
	case *err != nil:
		outcome = "error"
	}
	appendDuration.WithLabelValues(aggregate, outcome).Observe(time.Since(start).Seconds())
}
