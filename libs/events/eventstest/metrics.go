package eventstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is the first series of metric name in the default registry whose
// labels include every one of labels, or nil when there is none (the
// getters of a nil *dto.Metric answer zero). The registry is the process's:
// a test that runs with -count N compares against a value read before.
func Metric(t testing.TB, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok {
					if v != l.GetValue() {
						continue series
					}
					matched++
				}
			}
			if matched == len(labels) {
				return m
			}
		}
	}
	return nil
}
