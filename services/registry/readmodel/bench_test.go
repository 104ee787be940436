package readmodel

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// benchMachines is the size of the benchmarks' organization: 100,000
// machines, or what ANVIL_BENCH_SCALE makes of it (docs/performance.md).
func benchMachines(b *testing.B) int {
	return eventstest.BenchSize(b, "machines", 100_000, 500)
}

// BenchmarkMemoryPerMachine projects a realistic 100,000-machine fleet
// (labels, pool, hardware with two disks and two NICs, revisions,
// timestamps) and reports the live heap it takes per machine. Events are
// streamed so that only the model stays reachable.
func BenchmarkMemoryPerMachine(b *testing.B) {
	n := benchMachines(b)
	var perMachine float64
	var events uint64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := New()
		var seq uint64
		genFleet("acme", n, 1, &seq, func(e envelope) { m.Apply(e.seq, e.org, e.uuid, e.at, e.event) })
		runtime.GC()
		runtime.ReadMemStats(&after)
		perMachine = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
		events = seq
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perMachine, "bytes/machine")
	b.Logf("projected %d machines from %d events, %d time(s): %.0f bytes of live heap per machine", n, events, b.N, perMachine)
}

var (
	benchFleetsMu sync.Mutex
	benchFleets   = map[int]*Model{}
)

// benchFleet is the model of an organization of n machines and a second
// one of n/10 (so that isolation costs are included), built once per size.
func benchFleet(n int) *Model {
	benchFleetsMu.Lock()
	defer benchFleetsMu.Unlock()
	if m, ok := benchFleets[n]; ok {
		return m
	}
	m := New()
	var seq uint64
	genFleet("acme", n, 1, &seq, func(e envelope) { m.Apply(e.seq, e.org, e.uuid, e.at, e.event) })
	genFleet("globex", n/10, 2, &seq, func(e envelope) { m.Apply(e.seq, e.org, e.uuid, e.at, e.event) })
	benchFleets[n] = m
	return m
}

// BenchmarkListFilteredPage pages through filtered listings of the
// 100,000-machine organization 100 at a time (wrapping around at the end)
// and reports per-page latency percentiles.
func BenchmarkListFilteredPage(b *testing.B) {
	n := benchMachines(b)
	m := benchFleet(n)
	cases := []struct {
		name string
		f    Filter
	}{
		{"pool+status", Filter{Pool: "pool-07", Status: machine.StatusReady}},
		{"pool+status+selector", Filter{Pool: "pool-07", Status: machine.StatusReady, Selector: "env in (prod,staging),!gpu"}},
		{"selector", Filter{Selector: "env=prod,rack in (r01,r02,r03),!gpu,tier!=t1"}},
		{"status+selector-sparse", Filter{Status: machine.StatusFailed, Selector: "rack=r07"}},
		{"unfiltered", Filter{}},
		{"selector-matching-nothing", Filter{Selector: "rack=r99"}},
		// Worst case: no requirement pins a value, so no index helps and
		// nothing matches: every page scans the whole organization.
		{"unindexable-selector-matching-nothing", Filter{Selector: "!env,rack"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			f := c.f
			f.Limit = 100
			var lat []time.Duration
			items := 0
			for b.Loop() {
				start := time.Now()
				p, err := m.List("acme", f)
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				items += len(p.Items)
				f.Cursor = p.Next
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(items)/float64(len(lat)), "items/page")
			b.Logf("%d pages of up to 100 (%d machines in all) out of %d machines: p50 %.3fms p99 %.3fms", len(lat), items, n, pct(0.50), pct(0.99))
		})
	}
}

// BenchmarkApply measures projection throughput (events per second while
// rebuilding from zero).
func BenchmarkApply(b *testing.B) {
	n := eventstest.BenchSize(b, "machines", 10_000, 200)
	var seq uint64
	evs := fleet("acme", n, 1, &seq)
	b.ResetTimer()
	for b.Loop() {
		m := New()
		load(m, evs)
	}
	b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.Logf("applied %d events of %d machines into a fresh model %d time(s)", len(evs), n, b.N)
}

// BenchmarkSnapshotRestoreHash measures checkpointing the 100,000-machine
// fleet: encoding, decoding into a fresh model, and hashing.
func BenchmarkSnapshotRestoreHash(b *testing.B) {
	machines := benchMachines(b)
	m := benchFleet(machines)
	var snapMS, restoreMS, hashMS, size float64
	for b.Loop() {
		start := time.Now()
		blob, _ := m.Snapshot(nil)
		snapMS = float64(time.Since(start).Microseconds()) / 1000
		start = time.Now()
		r := New()
		if err := r.Restore(blob); err != nil {
			b.Fatal(err)
		}
		restoreMS = float64(time.Since(start).Microseconds()) / 1000
		start = time.Now()
		if r.Hash() != m.Hash() {
			b.Fatal("restore changed the hash")
		}
		hashMS = float64(time.Since(start).Microseconds()) / 2000 // two hashes
		size = float64(len(blob))
	}
	n := float64(machines + machines/10)
	b.ReportMetric(snapMS, "snapshot-ms")
	b.ReportMetric(restoreMS, "restore-ms")
	b.ReportMetric(hashMS, "hash-ms")
	b.ReportMetric(size/n, "snapshot-bytes/machine")
	b.Logf("snapshot of %.0f machines (two organizations): %.0f bytes, encoded in %.1fms, restored in %.1fms, hashed in %.1fms, %d time(s)",
		n, size, snapMS, restoreMS, hashMS, b.N)
}
