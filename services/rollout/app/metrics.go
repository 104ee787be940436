package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the rollout service's Prometheus metrics. A nil *Metrics
// records nothing (tests of pure pieces).
type Metrics struct {
	appendedEvents prometheus.Counter
	actions        *prometheus.CounterVec
	running        *prometheus.GaugeVec
}

var defaultMetrics = &Metrics{
	appendedEvents: promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_rollout_events_appended_total",
		Help: "Events the rollout drivers appended to rollouts.",
	}),
	actions: promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_rollout_actions_total",
		Help: "Actions (cordon, drain, reboot, waits, checks) the rollout drivers started, by kind.",
	}, []string{"kind"}),
	running: promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_rollout_actions_running",
		Help: "Actions being carried out now, by kind.",
	}, []string{"kind"}),
}

// DefaultMetrics are registered with the default Prometheus registry.
func DefaultMetrics() *Metrics { return defaultMetrics }

func (m *Metrics) appended(n int) {
	if m != nil {
		m.appendedEvents.Add(float64(n))
	}
}

func (m *Metrics) actionStarted(kind string) {
	if m != nil {
		m.actions.WithLabelValues(kind).Inc()
		m.running.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) actionEnded(kind string) {
	if m != nil {
		m.running.WithLabelValues(kind).Dec()
	}
}
