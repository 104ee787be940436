package app

import (
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Metrics are the rollout service's Prometheus metrics. A nil *Metrics
// records nothing (tests of pure pieces).
type Metrics struct {
	appendedEvents prometheus.Counter
	actions        *prometheus.CounterVec
	running        *prometheus.GaugeVec
	drains         *prometheus.HistogramVec
	rollouts       *prometheus.HistogramVec
}

// drainBuckets and rolloutBuckets are in seconds: a drain takes seconds
// to an hour (a PodDisruptionBudget can hold it), a rollout minutes to a
// day.
var (
	drainBuckets   = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
	rolloutBuckets = []float64{60, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 57600, 86400, 172800}
)

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
	drains: promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "anvil_rollout_drain_duration_seconds",
		Help: "Seconds from the start of a node's drain step to its outcome, by source (rollout, or operation: maintenance, " +
			"unassignment, deletion) and outcome (succeeded, failed, cancelled).",
		Buckets: drainBuckets,
	}, []string{"source", "outcome"}),
	rollouts: promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_rollout_duration_seconds",
		Help:    "Seconds from a rollout's start to its outcome (succeeded, failed, aborted); a retried rollout that fails or ends again is observed again, from its start.",
		Buckets: rolloutBuckets,
	}, []string{"outcome"}),
}

func init() {
	m := defaultMetrics
	for _, k := range []plan.ActionKind{plan.WaitForRollout, plan.RunChecks, plan.Cordon, plan.Drain, plan.IssueReboot,
		plan.ConfirmReboot, plan.WaitBoot, plan.WaitReady, plan.Uncordon} {
		m.actions.WithLabelValues(string(k))
		m.running.WithLabelValues(string(k))
	}
	for _, src := range []string{"rollout", "operation"} {
		for _, o := range []string{"succeeded", "failed", "cancelled"} {
			m.drains.WithLabelValues(src, o)
		}
	}
	for _, o := range []rollout.Status{rollout.StatusSucceeded, rollout.StatusFailed, rollout.StatusAborted} {
		m.rollouts.WithLabelValues(string(o))
	}
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

// rolloutEvent observes what event, about to be applied to s (the
// rollout's state before it), ends: a drain step (its start is in s) or
// the rollout. Whoever appends an event calls it once, so each outcome is
// observed once across replicas.
func (m *Metrics) rolloutEvent(s *rollout.State, event any) {
	if observe := m.observation(s, event); observe != nil {
		observe()
	}
}

// observation is rolloutEvent's measure, taken on the state before the
// event, to be recorded once the event is stored; nil when the event ends
// nothing measured.
func (m *Metrics) observation(s *rollout.State, event any) func() {
	if m == nil || s == nil {
		return nil
	}
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		event = v.Elem().Interface()
	}
	drain := func(machine string, step rollout.Step, attempt int, at time.Time, outcome string) func() {
		if step != rollout.StepDrain {
			return nil
		}
		if ms, ok := s.Machine(machine); ok && ms.Step == rollout.StepDrain && ms.Attempt == attempt &&
			ms.StepStatus == rollout.StepStatusRunning && !ms.StepStartedAt.IsZero() {
			took := nonNegative(at.Sub(ms.StepStartedAt))
			return func() { m.drains.WithLabelValues("rollout", outcome).Observe(took) }
		}
		return nil
	}
	ended := func(outcome rollout.Status, at time.Time) func() {
		if s.Exists() && !s.Refused && !s.Outcome.Final() && s.Outcome != outcome && !s.StartedAt.IsZero() {
			took := nonNegative(at.Sub(s.StartedAt))
			return func() { m.rollouts.WithLabelValues(string(outcome)).Observe(took) }
		}
		return nil
	}
	switch e := event.(type) {
	case rollout.StepSucceeded:
		return drain(e.Machine, e.Step, e.Attempt, e.At, "succeeded")
	case rollout.StepFailed:
		return drain(e.Machine, e.Step, e.Attempt, e.At, "failed")
	case rollout.StepCancelled:
		return drain(e.Machine, e.Step, e.Attempt, e.At, "cancelled")
	case rollout.Succeeded:
		return ended(rollout.StatusSucceeded, e.At)
	case rollout.Failed:
		return ended(rollout.StatusFailed, e.At)
	case rollout.Aborted:
		return ended(rollout.StatusAborted, e.At)
	}
	return nil
}

// rolloutEvents observes events appended together to a rollout whose
// state before them is s; s is not changed.
func (m *Metrics) rolloutEvents(s rollout.State, events []any) {
	if m == nil || len(events) == 0 {
		return
	}
	st := s.Clone()
	for _, e := range events {
		m.rolloutEvent(&st, e)
		st.Apply(e)
	}
}

// operationDrain observes the end of a one-machine operation's drain step
// (maintenance, unassignment, deletion) that started at startedAt.
func (m *Metrics) operationDrain(outcome string, startedAt, at time.Time) {
	if m != nil && !startedAt.IsZero() {
		m.drains.WithLabelValues("operation", outcome).Observe(nonNegative(at.Sub(startedAt)))
	}
}

func nonNegative(d time.Duration) float64 { return max(d.Seconds(), 0) }

// RolloutCounter counts the rollouts a read model holds by status.
type RolloutCounter interface {
	CountByStatus() map[rollout.Status]int
}

// The rollouts gauge is read from the read models at scrape time, so it is
// right from the first scrape after a restart. Replicas each report their
// own read model: take the max over them.
var (
	countersMu       sync.Mutex
	counters         = map[RolloutCounter]struct{}{}
	registerCounters sync.Once
	descRollouts     = prometheus.NewDesc("anvil_rollouts",
		"Rollouts by status (pending, running, paused, succeeded, failed, aborted), as this replica's read model holds them; a refused rollout counts as failed.",
		[]string{"status"}, nil)
)

type rolloutCollector struct{}

func (rolloutCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descRollouts }

func (rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	sum := map[rollout.Status]int{}
	countersMu.Lock()
	for c := range counters {
		for st, n := range c.CountByStatus() {
			sum[st] += n
		}
	}
	countersMu.Unlock()
	for _, st := range []rollout.Status{rollout.StatusPending, rollout.StatusRunning, rollout.StatusPaused,
		rollout.StatusSucceeded, rollout.StatusFailed, rollout.StatusAborted} {
		ch <- prometheus.MustNewConstMetric(descRollouts, prometheus.GaugeValue, float64(sum[st]), string(st))
	}
}

// TrackRollouts reports c in anvil_rollouts until the returned func runs.
// Several read models in one process (tests) add up.
func TrackRollouts(c RolloutCounter) (stop func()) {
	registerCounters.Do(func() { prometheus.MustRegister(rolloutCollector{}) })
	countersMu.Lock()
	counters[c] = struct{}{}
	countersMu.Unlock()
	return func() {
		countersMu.Lock()
		delete(counters, c)
		countersMu.Unlock()
	}
}
