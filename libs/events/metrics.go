package events

import (
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
)
