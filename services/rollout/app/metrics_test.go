package app

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// testMetrics are Metrics on their own registry.
func testMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	m := &Metrics{
		drains:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "drains", Buckets: drainBuckets}, []string{"source", "outcome"}),
		rollouts: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rollouts", Buckets: rolloutBuckets}, []string{"outcome"}),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.drains, m.rollouts)
	return m, reg
}

// observed returns count and sum of histogram name's series with the
// label values given (in label-name order).
func observed(t *testing.T, reg *prometheus.Registry, name string, values ...string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if i >= len(values) || l.GetValue() != values[i] {
					continue series
				}
			}
			return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	return 0, 0
}

// TestRolloutDurations: a drain step is observed from its start to its
// outcome, a rollout from its start to its outcome, each once.
func TestRolloutDurations(t *testing.T) {
	m, reg := testMetrics(t)
	t0 := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	var s rollout.State
	s.Apply(rollout.Started{ID: "r1", Pool: "p", Revision: 2, PoolSize: 1, Machines: []rollout.Machine{{UUID: "u1", Hostname: "n1"}}, At: t0})
	s.Apply(rollout.MachineBegun{Machine: "u1", At: t0})
	s.Apply(rollout.StepStarted{Machine: "u1", Step: rollout.StepDrain, Attempt: 1, At: t0.Add(10 * time.Second)})

	// Not a drain: nothing.
	m.rolloutEvent(&s, rollout.StepSucceeded{Machine: "u1", Step: rollout.StepCordon, Attempt: 1, At: t0.Add(20 * time.Second)})
	// Another attempt than the running one: nothing.
	m.rolloutEvent(&s, rollout.StepSucceeded{Machine: "u1", Step: rollout.StepDrain, Attempt: 2, At: t0.Add(20 * time.Second)})
	// The drain ends after 60 s (as a pointer, as decoded from the log).
	done := &rollout.StepSucceeded{Machine: "u1", Step: rollout.StepDrain, Attempt: 1, At: t0.Add(70 * time.Second)}
	m.rolloutEvent(&s, done)
	s.Apply(done)
	m.rolloutEvent(&s, *done) // applied already: the step is no longer running
	if n, sum := observed(t, reg, "drains", "succeeded", "rollout"); n != 1 || sum != 60 {
		t.Errorf("drains: %d observations summing %v, want 1 of 60", n, sum)
	}

	// The rollout fails after an hour, is retried, and succeeds after two.
	m.rolloutEvents(s, []any{rollout.Failed{Reason: "x", At: t0.Add(time.Hour)}})
	s.Apply(rollout.Failed{Reason: "x", At: t0.Add(time.Hour)})
	m.rolloutEvents(s, []any{rollout.Failed{Reason: "again", At: t0.Add(time.Hour)}}) // already failed: not again
	m.rolloutEvents(s, []any{rollout.Retried{At: t0.Add(90 * time.Minute)}, rollout.Succeeded{At: t0.Add(2 * time.Hour)}})
	if n, sum := observed(t, reg, "rollouts", "failed"); n != 1 || sum != 3600 {
		t.Errorf("failed rollouts: %d observations summing %v, want 1 of 3600", n, sum)
	}
	if n, sum := observed(t, reg, "rollouts", "succeeded"); n != 1 || sum != 7200 {
		t.Errorf("succeeded rollouts: %d observations summing %v, want 1 of 7200", n, sum)
	}
	if s.Outcome != rollout.StatusFailed {
		t.Errorf("rolloutEvents changed the state it was given: %s", s.Outcome)
	}

	// A nil *Metrics records nothing and does not panic.
	var none *Metrics
	none.rolloutEvent(&s, rollout.Succeeded{At: t0})
	none.rolloutEvents(s, []any{rollout.Succeeded{At: t0}})
	none.operationDrain("succeeded", t0, t0.Add(time.Minute))
}
