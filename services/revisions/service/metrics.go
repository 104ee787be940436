package service

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

// The render cache's counters, summed over the caches of every service
// instance in the process (one, except in tests).
var (
	cacheMu       sync.Mutex
	liveCaches    = map[*render.Cache]struct{}{}
	registerCache sync.Once

	descHits      = prometheus.NewDesc("anvil_render_cache_hits_total", "Renders answered from the cache.", nil, nil)
	descMisses    = prometheus.NewDesc("anvil_render_cache_misses_total", "Renders not found in the cache (concurrent misses for one key share one render).", nil, nil)
	descRenders   = prometheus.NewDesc("anvil_render_cache_renders_total", "Ignition configs actually rendered.", nil, nil)
	descEvictions = prometheus.NewDesc("anvil_render_cache_evictions_total", "Configs evicted to stay within the size bound.", nil, nil)
	descEntries   = prometheus.NewDesc("anvil_render_cache_entries", "Configs in the cache.", nil, nil)
	descBytes     = prometheus.NewDesc("anvil_render_cache_bytes", "Bytes of configs in the cache.", nil, nil)
)

type cacheCollector struct{}

func (cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descMisses, descRenders, descEvictions, descEntries, descBytes} {
		ch <- d
	}
}

func (cacheCollector) Collect(ch chan<- prometheus.Metric) {
	var s render.CacheStats
	cacheMu.Lock()
	for c := range liveCaches {
		cs := c.Stats()
		s.Hits += cs.Hits
		s.Misses += cs.Misses
		s.Renders += cs.Renders
		s.Evictions += cs.Evictions
		s.Entries += cs.Entries
		s.Bytes += cs.Bytes
	}
	cacheMu.Unlock()
	ch <- prometheus.MustNewConstMetric(descHits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(descMisses, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(descRenders, prometheus.CounterValue, float64(s.Renders))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(s.Evictions))
	ch <- prometheus.MustNewConstMetric(descEntries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.Bytes))
}

// trackCache exposes c's counters on /metrics until the returned func runs.
func trackCache(c *render.Cache) func() {
	registerCache.Do(func() { prometheus.MustRegister(cacheCollector{}) })
	cacheMu.Lock()
	liveCaches[c] = struct{}{}
	cacheMu.Unlock()
	return func() {
		cacheMu.Lock()
		delete(liveCaches, c)
		cacheMu.Unlock()
	}
}
