package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// BenchmarkAppendVsRawPublish measures Append (optimistic concurrency, dedup
// ID, envelope, span) against a raw synchronous js.Publish of the same bytes
// on the same server, in the same run. Target: ratio >= 0.8.
func BenchmarkAppendVsRawPublish(b *testing.B) {
	env := eventstest.Start(b, testRegistry())
	ctx := context.Background()
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "bench"}
	sample, err := env.Store.Append(ctx, ref, 0, events.New(counted{N: 1})...)
	if err != nil {
		b.Fatal(err)
	}
	raw := events.EncodeMsg(&sample[0])
	raw.Header.Del(nats.MsgIdHdr) // the same ID on every raw publish would be deduplicated
	n := max(b.N, eventstest.BenchSize(b, "appends and as many raw publishes", 2000, 60))

	rounds := 6 // alternate, so drift on a shared machine hits both sides alike
	var rawDur, appDur time.Duration
	version := events.Version(sample)
	b.ResetTimer()
	for r := range rounds {
		start := time.Now()
		for i := range n / rounds {
			msg := &nats.Msg{Subject: fmt.Sprintf("events.acme.raw.r%d", r), Data: raw.Data, Header: raw.Header}
			if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
				b.Fatal(i, err)
			}
		}
		rawDur += time.Since(start)
		start = time.Now()
		for range n / rounds {
			envs, err := env.Store.Append(ctx, ref, version, events.New(counted{N: 1})...)
			if err != nil {
				b.Fatal(err)
			}
			version = events.Version(envs)
		}
		appDur += time.Since(start)
	}
	b.StopTimer()
	total := float64(n / rounds * rounds)
	b.ReportMetric(total/rawDur.Seconds(), "raw_publish/s")
	b.ReportMetric(total/appDur.Seconds(), "append/s")
	b.ReportMetric(rawDur.Seconds()/appDur.Seconds(), "ratio_vs_raw")
	b.Logf("%d raw publishes in %s, %d appends (one aggregate, optimistic concurrency) in %s, in %d alternating rounds; ratio %.2f",
		int(total), rawDur.Round(time.Millisecond), int(total), appDur.Round(time.Millisecond), rounds, rawDur.Seconds()/appDur.Seconds())
}
