package events_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// benchRounds alternate the measured sides (alternate), so that drift on
// a shared machine hits both alike.
const benchRounds = 20

// BenchmarkAppendVsRawPublish measures Append (optimistic concurrency,
// dedup ID, envelope, span, metrics) on one aggregate against raw
// synchronous js.PublishMsg calls of the same bytes with the same headers
// (a fresh Nats-Msg-Id and the subject's Nats-Expected-Last-Subject-
// Sequence on each) on the same server, in the same run. Target: ratio >=
// 0.9.
func BenchmarkAppendVsRawPublish(b *testing.B) { sampledAndNot(b, appendVsRawPublish) }

func appendVsRawPublish(b *testing.B) {
	env := eventstest.Start(b, testRegistry())
	ctx := context.Background()
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "bench"}
	n := max(b.N, eventstest.BenchSize(b, "appends and as many raw publishes", 20000, 3*benchRounds))
	wire, version := appendedWire(b, env, ref)
	raw := newRawPublisher(b, wire, n)
	rawSubject := events.AggregateRef{Org: "acme", Type: "machine", ID: "rawpb"}.Subject()

	b.ResetTimer()
	rs := alternate(func() time.Duration {
		start := time.Now()
		for range n / benchRounds {
			ack, err := env.JS.PublishMsg(ctx, raw.next(rawSubject))
			if err != nil {
				b.Fatal(err)
			}
			raw.last[rawSubject] = ack.Sequence
		}
		return time.Since(start)
	}, func() time.Duration {
		start := time.Now()
		for range n / benchRounds {
			envs, err := env.Store.Append(ctx, ref, version, events.New(counted{N: 1})...)
			if err != nil {
				b.Fatal(err)
			}
			version = events.Version(envs)
		}
		return time.Since(start)
	})
	b.StopTimer()
	rs.report(b, n/benchRounds, "appends (one aggregate, optimistic concurrency)")
}

// BenchmarkAppendPipelinedVsRawAsync measures AppendMany on many
// aggregates (a batch of one one-event append per aggregate, optimistic
// concurrency) against raw js.PublishMsgAsync calls of the same bytes with
// the same headers, one per aggregate subject, all sent before
// PublishAsyncComplete is awaited, on the same server, in the same run.
func BenchmarkAppendPipelinedVsRawAsync(b *testing.B) { sampledAndNot(b, appendPipelinedVsRawAsync) }

func appendPipelinedVsRawAsync(b *testing.B) {
	env := eventstest.Start(b, testRegistry())
	ctx := context.Background()
	aggregates := eventstest.BenchSize(b, "aggregates appended to once a round, as many raw subjects", 1000, 10)
	wire, _ := appendedWire(b, env, benchAggregate("w", 0))
	raw := newRawPublisher(b, wire, aggregates*benchRounds+1)
	batch := make([]events.AppendRequest, aggregates)
	rawSubjects := make([]string, aggregates)
	for i := range batch {
		batch[i].Ref = benchAggregate("p", i)
		rawSubjects[i] = benchAggregate("r", i).Subject()
	}
	futures := make([]jetstream.PubAckFuture, aggregates)
	// Both sides set up their asynchronous publisher (a reply
	// subscription) on their first publish: not in the timed rounds.
	warm := events.AppendRequest{Ref: benchAggregate("w", 1), Drafts: events.New(counted{N: 1})}
	if r := env.Store.AppendMany(ctx, []events.AppendRequest{warm}); r[0].Err != nil {
		b.Fatal(r[0].Err)
	}
	if _, err := env.JS.PublishMsgAsync(raw.next(benchAggregate("w", 2).Subject())); err != nil {
		b.Fatal(err)
	}
	<-env.JS.PublishAsyncComplete()

	b.ResetTimer()
	rs := alternate(func() time.Duration {
		start := time.Now()
		for i, subject := range rawSubjects {
			f, err := env.JS.PublishMsgAsync(raw.next(subject))
			if err != nil {
				b.Fatal(err)
			}
			futures[i] = f
		}
		<-env.JS.PublishAsyncComplete()
		took := time.Since(start)
		for i, f := range futures { // bookkeeping for the next round's headers
			select {
			case ack := <-f.Ok():
				raw.last[rawSubjects[i]] = ack.Sequence
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		return took
	}, func() time.Duration {
		start := time.Now()
		for i := range batch {
			batch[i].Drafts = events.New(counted{N: 1})
		}
		for i, r := range env.Store.AppendMany(ctx, batch) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			batch[i].Expected = events.Version(r.Events)
		}
		return time.Since(start)
	})
	b.StopTimer()
	rs.report(b, aggregates, fmt.Sprintf("pipelined appends (%d aggregates a batch, optimistic concurrency)", aggregates))
}

// BenchmarkAppendChainedVsOneByOne measures one Append of 16 events
// (chained: sent together, each expecting its predecessor, events.md)
// against the same 16 events appended one Append each (each waiting for
// its answer, as an append of several events did before it was chained)
// on the same server, in the same run: the ratio is the chaining's gain.
func BenchmarkAppendChainedVsOneByOne(b *testing.B) { sampledAndNot(b, appendChainedVsOneByOne) }

func appendChainedVsOneByOne(b *testing.B) {
	const perAppend = 16
	env := eventstest.Start(b, testRegistry())
	ctx := context.Background()
	appends := max(b.N, eventstest.BenchSize(b, "appends of 16 events and as many times 16 appends of one", 1000, benchRounds))
	chained, single := benchAggregate("c", 0), benchAggregate("s", 0)
	var chainedVersion, singleVersion uint64
	drafts := func() []events.Draft {
		d := make([]events.Draft, perAppend)
		for i := range d {
			d[i] = events.Draft{Payload: counted{N: i}}
		}
		return d
	}
	b.ResetTimer()
	rs := alternate(func() time.Duration {
		start := time.Now()
		for range appends / benchRounds {
			for _, d := range drafts() {
				envs, err := env.Store.Append(ctx, single, singleVersion, d)
				if err != nil {
					b.Fatal(err)
				}
				singleVersion = events.Version(envs)
			}
		}
		return time.Since(start)
	}, func() time.Duration {
		start := time.Now()
		for range appends / benchRounds {
			envs, err := env.Store.Append(ctx, chained, chainedVersion, drafts()...)
			if err != nil {
				b.Fatal(err)
			}
			chainedVersion = events.Version(envs)
		}
		return time.Since(start)
	})
	b.StopTimer()
	rs.reportAgainst(b, perAppend*(appends/benchRounds), "one_by_one", "events in appends of 16 (chained)")
}

func benchAggregate(prefix string, i int) events.AggregateRef {
	return events.AggregateRef{Org: "acme", Type: "machine", ID: fmt.Sprintf("%s%05d", prefix, i)}
}

// alternate runs raw and app benchRounds times each, taking turns, raw
// first in even rounds and app first in odd ones, since on a shared
// machine the side that runs second in a round runs slower. Each returns
// how long its measured part took.
func alternate(raw, app func() time.Duration) rounds {
	var rs rounds
	for r := range benchRounds {
		var rawDur, appDur time.Duration
		if r%2 == 0 {
			rawDur = raw()
			appDur = app()
		} else {
			appDur = app()
			rawDur = raw()
		}
		rs.raw = append(rs.raw, rawDur)
		rs.app = append(rs.app, appDur)
	}
	return rs
}

// rounds are the durations of each side, round by round.
type rounds struct{ raw, app []time.Duration }

// report reports what both append benchmarks do: the throughput of each
// side over all rounds, and as the ratio the median over the rounds of
// raw time / append time, each from two runs next to each other, which a
// burst of load from elsewhere moves less than it moves the totals.
func (rs rounds) report(b *testing.B, perRound int, what string) {
	rs.reportAgainst(b, perRound, "raw", what)
}

// reportAgainst is report with the baseline named base (its metric is
// base_per_s).
func (rs rounds) reportAgainst(b *testing.B, perRound int, base, what string) {
	total := float64(perRound * len(rs.raw))
	var rawSum, appSum time.Duration
	ratios := make([]float64, len(rs.raw))
	for i := range rs.raw {
		rawSum += rs.raw[i]
		appSum += rs.app[i]
		ratios[i] = rs.raw[i].Seconds() / rs.app[i].Seconds()
	}
	slices.Sort(ratios)
	ratio := (ratios[(len(ratios)-1)/2] + ratios[len(ratios)/2]) / 2
	b.ReportMetric(total/appSum.Seconds(), "append_per_s")
	b.ReportMetric(total/rawSum.Seconds(), base+"_per_s")
	b.ReportMetric(ratio, "ratio")
	b.Logf("%d %s in %s, %d %s in %s, in %d alternating rounds; ratio: median of the rounds %.2f (from %.2f to %.2f), of the totals %.2f",
		int(total), base, rawSum.Round(time.Millisecond), int(total), what, appSum.Round(time.Millisecond), len(rs.raw),
		ratio, ratios[0], ratios[len(ratios)-1], rawSum.Seconds()/appSum.Seconds())
}

// sampledAndNot runs bench "sampled", with tracing as the services set it
// up (telemetry.SetupTracing: an SDK tracer provider that records every
// span, W3C trace context; the events, and so the raw messages, carry a
// sampled traceparent header), and "unsampled", with the same setup
// sampling no span (an unsampled traceparent).
func sampledAndNot(b *testing.B, bench func(*testing.B)) {
	sampler := benchTracing()
	for _, c := range []struct {
		name   string
		sample bool
	}{{"sampled", true}, {"unsampled", false}} {
		b.Run(c.name, func(b *testing.B) {
			sampler.sample.Store(c.sample)
			bench(b)
		})
	}
}

// benchTracing installs the benchmarks' tracing, once: the events
// package's tracer delegates to the first tracer provider installed in
// the process, for good, so sampling is switched behind it.
var benchTracing = sync.OnceValue(func() *switchedSampler {
	s := &switchedSampler{}
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(s)))
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return s
})

// switchedSampler samples every span or none.
type switchedSampler struct{ sample atomic.Bool }

func (s *switchedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	if s.sample.Load() {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (s *switchedSampler) Description() string { return "switched" }

// appendedWire appends one event to ref (new) and returns the message the
// store put on the wire, as a core subscriber on its subject receives it
// (headers included), and the aggregate's version.
func appendedWire(b *testing.B, env *eventstest.Env, ref events.AggregateRef) (*nats.Msg, uint64) {
	b.Helper()
	sub, err := env.Conn.SubscribeSync(ref.Subject())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	envs, err := env.Store.Append(context.Background(), ref, 0, events.New(counted{N: 1})...)
	if err != nil {
		b.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	for _, h := range []string{jetstream.MsgIDHeader, jetstream.ExpectedLastSubjSeqHeader} {
		if m.Header.Get(h) == "" {
			b.Fatalf("an append sent no %s header: the raw baseline would not match it", h)
		}
	}
	return m, events.Version(envs)
}

// rawPublisher makes the messages of the raw baselines: an append's wire
// message (same payload, same headers) with the two headers an append sets
// per event filled in per message: a fresh Nats-Msg-Id (made before the
// timer starts) and the expected last sequence of its subject.
type rawPublisher struct {
	header nats.Header
	data   []byte
	ids    []string
	last   map[string]uint64 // by subject
}

func newRawPublisher(b *testing.B, wire *nats.Msg, n int) *rawPublisher {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	return &rawPublisher{header: wire.Header, data: wire.Data, ids: ids, last: map[string]uint64{}}
}

// next is the next raw message on subject; last must hold the sequence
// of the previous one on subject.
func (r *rawPublisher) next(subject string) *nats.Msg {
	h := maps.Clone(r.header)
	h[jetstream.MsgIDHeader] = r.ids[:1:1]
	r.ids = r.ids[1:]
	h[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(r.last[subject], 10)}
	return &nats.Msg{Subject: subject, Header: h, Data: r.data}
}
