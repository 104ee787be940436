package service_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

// BenchmarkRegister100k registers 100,000 machines through the command path
// (NATS request, token check, decide, optimistic append) with 64 concurrent
// callers, against raw synchronous JetStream publishes at the same
// concurrency in the same run. Then it lists a filtered page of 100 out of
// the 100,000 over NATS and reports p50/p99. ANVIL_BENCH_SCALE sets the
// size (docs/performance.md).
func BenchmarkRegister100k(b *testing.B) {
	n := eventstest.BenchSize(b, "machines", 100_000, 50)
	pages := eventstest.BenchSize(b, "page reads", 500, 20)
	page := min(100, n)
	workers := min(64, n)
	// no registration rate: the benchmark registers as fast as it can
	f := start(b, service.Config{EnrollmentRate: -1})
	enroll := f.org(b, "acme")
	ctx := context.Background()
	var rawAll, regAll time.Duration
	b.ResetTimer()
	for iter := range b.N {
		raw, err := eventstest.Parallel(n, workers, func(i int) error {
			_, err := f.env.JS.Publish(ctx, fmt.Sprintf("events.bench.raw.r%d-%d", iter, i), []byte(`{"uuid":"4c4c4544-0035-4b10-8056-000000000001","mac":"aa:bb:cc:dd:ee:ff","enrollment_token_id":"abcdefghijklmnop"}`))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := eventstest.Parallel(n, workers, func(i int) error {
			_, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: fmt.Sprintf("%08x-0000-4000-8000-%012x", iter, i+1), MAC: "aa:bb:cc:dd:ee:ff"})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/raw.Seconds(), "raw_publish/s")
		b.ReportMetric(float64(n)/reg.Seconds(), "machines/s")
		b.ReportMetric(raw.Seconds()/reg.Seconds(), "ratio_vs_raw")
		rawAll, regAll = rawAll+raw, regAll+reg
	}
	b.StopTimer()

	// A filtered page of 100, through NATS, once the projection has it.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := f.c.ListMachines(ctx, api.MachineList{Org: "acme", Status: "ready_unassigned", Limit: page})
		if err == nil && len(p.Items) == page {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("projection never showed a full page: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lat []time.Duration
	cursor, items := "", 0
	for range pages {
		t0 := time.Now()
		p, err := f.c.ListMachines(ctx, api.MachineList{Org: "acme", Status: "ready_unassigned", Limit: page, Cursor: cursor})
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		cursor, items = p.Next, items+len(p.Items)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)*99/100].Microseconds())/1000
	b.ReportMetric(p50, "list_p50_ms")
	b.ReportMetric(p99, "list_p99_ms")
	b.Logf("registered %d machines %d time(s), %d callers at a time, in %s (raw publishes of as many: %s, ratio %.2f); "+
		"then read %d pages of up to %d (%d machines in all) over NATS: p50 %.2fms p99 %.2fms",
		n, b.N, workers, regAll.Round(time.Millisecond), rawAll.Round(time.Millisecond), rawAll.Seconds()/regAll.Seconds(),
		pages, page, items, p50, p99)
}
