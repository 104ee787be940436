package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// counts is a realistic small read model: per aggregate, how many events
// and the running sum.
type counts struct {
	mu         sync.Mutex
	checkpoint uint64
	per        map[string]*[2]int
}

func (c *counts) Apply(env *events.Envelope, payload any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := env.AggregateID
	e := c.per[key]
	if e == nil {
		e = &[2]int{}
		c.per[key] = e
	}
	e[0]++
	if a, ok := payload.(added); ok {
		e[1] += a.N
	}
	c.checkpoint = env.Sequence
	return nil
}
func (c *counts) Skip(seq uint64) { c.mu.Lock(); c.checkpoint = seq; c.mu.Unlock() }
func (c *counts) Checkpoint() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkpoint
}
func (c *counts) Reset() { c.mu.Lock(); c.checkpoint, c.per = 0, map[string]*[2]int{}; c.mu.Unlock() }

// fillFast writes aggregates×perAggregate real envelopes with async
// publishes; the fill is set-up, not what is measured.
func fillFast(b *testing.B, env *eventstest.Env, aggregates, perAggregate int) uint64 {
	ctx := context.Background()
	var last uint64
	for i := range perAggregate {
		for a := range aggregates {
			e := events.Envelope{
				ID: fmt.Sprintf("%08d-%04d", a, i), Type: "test.added", SchemaVersion: 1,
				Org: "acme", AggregateType: "machine", AggregateID: fmt.Sprintf("m%05d", a),
				Time: time.Now().UTC(), Actor: "bench", CorrelationID: "c", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
			}
			msg := events.EncodeMsg(&e)
			if _, err := env.JS.PublishMsgAsync(msg); err != nil {
				b.Fatal(err)
			}
			if a%2000 == 1999 {
				<-env.JS.PublishAsyncComplete()
			}
		}
		select {
		case <-env.JS.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("async publish stalled")
		}
	}
	head, err := env.Store.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	last = head
	return last
}

// BenchmarkRebuildVsRawRead rebuilds a projection over 1,000,000 events
// (10,000 aggregates × 100) and compares its rate with a raw ordered-consumer
// read of the same stream in the same run. Targets: ratio >= 0.5 and the
// rebuild in <= 10 s. ANVIL_BENCH_SCALE sets the size (docs/performance.md).
func BenchmarkRebuildVsRawRead(b *testing.B) {
	aggregates := eventstest.BenchSize(b, "aggregates", 10_000, 50)
	per := eventstest.BenchSize(b, "events per aggregate", 100, 5)
	env := eventstest.Start(b, registry())
	last := fillFast(b, env, aggregates, per)
	total := float64(last)
	ctx := context.Background()
	stream, _ := env.JS.Stream(ctx, events.StreamName)

	b.ResetTimer()
	var rawDur, rebuildDur time.Duration
	for range b.N {
		start := time.Now()
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(4096))
		if err != nil {
			b.Fatal(err)
		}
		var bytes int
		for {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			bytes += len(m.Data())
			meta, _ := m.Metadata()
			if meta.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
		rawDur += time.Since(start)

		model := &counts{per: map[string]*[2]int{}}
		r := NewRunner(Config{Name: "bench"}, env.JS, registry(), model, nil, nil)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		start = time.Now()
		go func() { defer close(done); _ = r.Run(rctx) }()
		if err := r.WaitFor(ctx, last); err != nil {
			b.Fatal(err)
		}
		rebuildDur += time.Since(start)
		cancel()
		<-done
		if len(model.per) != aggregates {
			b.Fatalf("model has %d aggregates, want %d", len(model.per), aggregates)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(total*n/rawDur.Seconds(), "raw_read_events/s")
	b.ReportMetric(total*n/rebuildDur.Seconds(), "rebuild_events/s")
	b.ReportMetric(rawDur.Seconds()/rebuildDur.Seconds(), "ratio_vs_raw")
	b.ReportMetric(rebuildDur.Seconds()/n, "rebuild_s")
	b.Logf("%d events (%d aggregates × %d) read raw in %s and rebuilt into a projection in %s, %d time(s); ratio %.2f",
		last, aggregates, per, (rawDur / time.Duration(b.N)).Round(time.Millisecond), (rebuildDur / time.Duration(b.N)).Round(time.Millisecond),
		b.N, rawDur.Seconds()/rebuildDur.Seconds())
}
