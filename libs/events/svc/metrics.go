package svc

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events/buildinfo"
)

var buildInfo = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Name: "anvil_build_info",
	Help: "Always 1: the service's version, VCS commit and Go version.",
}, []string{"service", "version", "git_commit", "go_version"})

// runtimes are the started services of this process (one, except in the
// dev stack and tests), read at scrape time by runtimeCollector.
var (
	runtimesMu       sync.Mutex
	runtimes         = map[*Runtime]struct{}{}
	registerRuntimes sync.Once
)

// jetStreamProbeTimeout bounds the JetStream check of one scrape.
const jetStreamProbeTimeout = 2 * time.Second

var (
	descNATSConnected = prometheus.NewDesc("anvil_nats_connected",
		"1 while the service's NATS connection is connected, else 0 (read at scrape time).", []string{"service"}, nil)
	descJetStreamAvailable = prometheus.NewDesc("anvil_jetstream_available",
		"1 if JetStream answered an account info request within 2s at scrape time, else 0.", []string{"service"}, nil)
)

// runtimeCollector reports each service's connection, read when scraped,
// so that the value is never stale and needs no background loop. Several
// runtimes of one service in a process (tests) report the worst of them.
type runtimeCollector struct{}

func (runtimeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNATSConnected
	ch <- descJetStreamAvailable
}

func (runtimeCollector) Collect(ch chan<- prometheus.Metric) {
	runtimesMu.Lock()
	live := make([]*Runtime, 0, len(runtimes))
	for rt := range runtimes {
		live = append(live, rt)
	}
	runtimesMu.Unlock()
	// Probed in parallel: a JetStream that does not answer costs one
	// timeout per scrape, not one per service.
	type state struct{ connected, available float64 }
	states := make([]state, len(live))
	var wg sync.WaitGroup
	for i, rt := range live {
		if rt.Conn == nil || !rt.Conn.IsConnected() {
			continue
		}
		states[i].connected = 1
		if rt.JS == nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), jetStreamProbeTimeout)
			defer cancel()
			if _, err := rt.JS.AccountInfo(ctx); err == nil {
				states[i].available = 1
			}
		})
	}
	wg.Wait()
	connected, available := map[string]float64{}, map[string]float64{}
	for i, rt := range live {
		name, st := rt.Config.Service, states[i]
		if prev, ok := connected[name]; !ok || st.connected < prev {
			connected[name] = st.connected
		}
		if prev, ok := available[name]; !ok || st.available < prev {
			available[name] = st.available
		}
	}
	names := make([]string, 0, len(connected))
	for n := range connected {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ch <- prometheus.MustNewConstMetric(descNATSConnected, prometheus.GaugeValue, connected[n], n)
		ch <- prometheus.MustNewConstMetric(descJetStreamAvailable, prometheus.GaugeValue, available[n], n)
	}
}

// trackRuntime sets the service's anvil_build_info and reports its
// connection until the returned func runs (at Close).
func trackRuntime(rt *Runtime) func(context.Context) error {
	bi := buildinfo.Get()
	buildInfo.WithLabelValues(rt.Config.Service, bi.Version, bi.GitCommit, bi.GoVersion).Set(1)
	registerRuntimes.Do(func() { prometheus.MustRegister(runtimeCollector{}) })
	runtimesMu.Lock()
	runtimes[rt] = struct{}{}
	runtimesMu.Unlock()
	return func(context.Context) error {
		runtimesMu.Lock()
		delete(runtimes, rt)
		runtimesMu.Unlock()
		return nil
	}
}
