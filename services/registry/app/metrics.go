package app

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// The registry's gauges are read from the machine read model at scrape
// time (a collector, not counters kept by hand), so they are right from
// the first scrape after a restart. Every replica holds the whole model
// and reports it: take the max over replicas, not the sum.
var (
	trackedMu       sync.Mutex
	tracked         = map[*App]struct{}{}
	registerTracked sync.Once

	descMachines = prometheus.NewDesc("anvil_machines",
		"Machines by status, every organization together.", []string{"status"}, nil)
	descConnectivity = prometheus.NewDesc("anvil_machines_connectivity",
		"Machines by connectivity: online, offline, or unknown (no heartbeat judged yet, e.g. never booted).", []string{"connectivity"}, nil)
	descOfflineLongest = prometheus.NewDesc("anvil_machines_offline_longest_seconds",
		"Per machine status, seconds since the offline machine that has been silent longest was last seen; 0 when no machine of that status is offline.",
		[]string{"status"}, nil)
)

type machineCollector struct{}

func (machineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMachines
	ch <- descConnectivity
	ch <- descOfflineLongest
}

func (machineCollector) Collect(ch chan<- prometheus.Metric) {
	byStatus, byConn, longest := map[machine.Status]int{}, map[machine.Connectivity]int{}, map[machine.Status]time.Duration{}
	trackedMu.Lock()
	for a := range tracked {
		c := a.Machines.Model().Counts(a.now())
		for k, n := range c.ByStatus {
			byStatus[k] += n
		}
		for k, n := range c.ByConnectivity {
			byConn[k] += n
		}
		for k, d := range c.LongestOffline {
			longest[k] = max(longest[k], d)
		}
	}
	trackedMu.Unlock()
	for _, st := range machine.Statuses() {
		ch <- prometheus.MustNewConstMetric(descMachines, prometheus.GaugeValue, float64(byStatus[st]), string(st))
		ch <- prometheus.MustNewConstMetric(descOfflineLongest, prometheus.GaugeValue, longest[st].Seconds(), string(st))
	}
	for _, c := range []machine.Connectivity{machine.Online, machine.Offline, machine.ConnectivityUnknown} {
		label := string(c)
		if c == machine.ConnectivityUnknown {
			label = "unknown"
		}
		ch <- prometheus.MustNewConstMetric(descConnectivity, prometheus.GaugeValue, float64(byConn[c]), label)
	}
}

func (a *App) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// TrackMetrics reports a's machines in the anvil_machines gauges until
// the returned func runs. Several registries in one process (tests) add up.
func TrackMetrics(a *App) (stop func()) {
	registerTracked.Do(func() { prometheus.MustRegister(machineCollector{}) })
	trackedMu.Lock()
	tracked[a] = struct{}{}
	trackedMu.Unlock()
	return func() {
		trackedMu.Lock()
		delete(tracked, a)
		trackedMu.Unlock()
	}
}
