package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/telemetry"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// loadMachines puts n pre-registered machines of org into the log the way
// the registry would have written them (one machine.preregistered event
// per machine aggregate), with asynchronous batched publishes instead of
// one optimistic append per machine, then waits until the registry's read
// model has applied them all. Machine i is in pool-(i%10) with label
// rack=r(i%7).
func loadMachines(b *testing.B, s *stack, org string, n int) {
	b.Helper()
	ctx := context.Background()
	// The first one through the store, to learn the envelope the registry
	// expects (type, schema version).
	first := machine.Preregistered{UUID: uuidN(0), Hostname: "w000000", Labels: map[string]string{"rack": "r0"}, Pool: "pool-0"}
	envs, err := s.env.Store.Append(ctx, events.AggregateRef{Org: org, Type: "machine", ID: first.UUID}, 0, events.Draft{Payload: first})
	if err != nil {
		b.Fatal(err)
	}
	tmpl := envs[0]
	js, err := jetstream.New(s.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	for i := 1; i < n; i++ {
		p := machine.Preregistered{UUID: uuidN(i), Hostname: fmt.Sprintf("w%06d", i),
			Labels: map[string]string{"rack": "r" + strconv.Itoa(i%7)}, Pool: "pool-" + strconv.Itoa(i%10)}
		env := tmpl
		env.ID, env.AggregateID, env.Time = fmt.Sprintf("bench-%d", i), p.UUID, time.Now().UTC()
		if env.Payload, err = json.Marshal(p); err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishMsgAsync(events.EncodeMsg(&env), jetstream.WithMsgID(env.ID)); err != nil {
			b.Fatal(err)
		}
		if i%4096 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		b.Fatal("publishes not acknowledged")
	}
	published := time.Since(t0)
	eventstest.Eventually(b, "the registry's read model caught up", 5*time.Minute, 20*time.Millisecond, func() (bool, string) {
		if lag := s.reg.Machines.Lag(); lag != 0 {
			return false, fmt.Sprintf("%d events behind", lag)
		}
		req, _ := http.NewRequest("GET", s.base+"/api/v1/orgs/"+org+"/machines/"+uuidN(n-1), nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == 200, res.Status
	})
	projected := time.Since(t0)
	// The other services (boot, revisions) follow the same events: the
	// reads are measured once every consumer of the log has caught up, so
	// that neither side's rounds pay for that work.
	eventstest.WaitConsumersCaughtUp(b, s.env.JS, events.StreamName, 5*time.Minute)
	b.Logf("loaded %d machines: published in %s, projected after %s, every consumer caught up after %s",
		n, published.Round(time.Millisecond), projected.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}

type answer struct {
	body        []byte
	contentType string
	etag        string
}

// drive sends total GETs of urls (cycled) over workers keep-alive
// connections and returns each request's latency and the wall time.
func drive(b *testing.B, base, tok string, urls []string, workers, total int) ([]time.Duration, time.Duration) {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: workers, MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, total)
	wall, err := eventstest.Parallel(total, workers, func(i int) error {
		req, _ := http.NewRequest("GET", base+urls[i%len(urls)], nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		t0 := time.Now()
		res, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err == nil && res.StatusCode != 200 {
				err = fmt.Errorf("%s: %d", urls[i%len(urls)], res.StatusCode)
			}
		}
		lat[i] = time.Since(t0)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return lat, wall
}

func pct(lat []time.Duration, p int) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100].Microseconds()) / 1000
}

// compare runs the same requests against the gateway and against a bare
// net/http handler that answers each with the gateway's very bytes,
// alternating rounds so that both see the same machine load, and reports
// p50/p99 (ms), requests per second and the throughput ratio.
func compare(b *testing.B, name string, s *stack, tok string, urls []string, perRound int) {
	b.Helper()
	answers := map[string]answer{}
	for _, u := range urls {
		var raw []byte
		r := s.do("GET", u, tok, nil, nil, &raw)
		if r.status != 200 {
			b.Fatalf("%s: %d %s", u, r.status, raw)
		}
		answers[u] = answer{body: raw, contentType: r.header.Get("Content-Type"), etag: r.header.Get("ETag")}
	}
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.RequestURI()]
		w.Header().Set("Content-Type", a.contentType)
		if a.etag != "" {
			w.Header().Set("ETag", a.etag)
		}
		_, _ = w.Write(a.body)
	}))
	defer bare.Close()
	const workers = 16
	drive(b, s.base, tok, urls, workers, perRound/4) // warm up both
	drive(b, bare.URL, tok, urls, workers, perRound/4)
	var ours, base []time.Duration
	var oursWall, baseWall, oursCPU, baseCPU time.Duration
	for range 3 {
		c0 := processCPU()
		l, w := drive(b, bare.URL, tok, urls, workers, perRound)
		c1 := processCPU()
		base, baseWall, baseCPU = append(base, l...), baseWall+w, baseCPU+c1-c0
		l, w = drive(b, s.base, tok, urls, workers, perRound)
		ours, oursWall, oursCPU = append(ours, l...), oursWall+w, oursCPU+processCPU()-c1
	}
	b.Logf("%s: the gateway's read cache over the whole run so far: %s", name, readCacheCounts(b))
	oursRPS, baseRPS := float64(len(ours))/oursWall.Seconds(), float64(len(base))/baseWall.Seconds()
	b.ReportMetric(pct(ours, 50), name+"_p50_ms")
	b.ReportMetric(pct(ours, 99), name+"_p99_ms")
	b.ReportMetric(oursRPS, name+"_req/s")
	b.ReportMetric(pct(base, 50), name+"_base_p50_ms")
	b.ReportMetric(pct(base, 99), name+"_base_p99_ms")
	b.ReportMetric(baseRPS, name+"_base_req/s")
	b.ReportMetric(oursRPS/baseRPS, name+"_ratio")
	b.Logf("%s: %d requests (%d distinct URLs) each to the gateway and to a bare net/http handler, %d at a time; ours p50 %.2fms p99 %.2fms %.0f req/s %.0fµs CPU; bare net/http p50 %.2fms p99 %.2fms %.0f req/s %.0fµs CPU; ratio %.2f (%d bytes per answer)",
		name, len(ours), len(urls), workers, pct(ours, 50), pct(ours, 99), oursRPS, perRequest(oursCPU, len(ours)),
		pct(base, 50), pct(base, 99), baseRPS, perRequest(baseCPU, len(base)), oursRPS/baseRPS, len(answers[urls[0]].body))
}

// BenchmarkMachineReads reads one machine and a filtered page of 100 with
// 100,000 machines in the inventory, over loopback HTTP with a viewer
// token, against a bare net/http handler returning the same bytes in the
// same run (target: ratio of throughputs >= 0.5). ANVIL_BENCH_SCALE sets
// the sizes (docs/performance.md). The log also gives the process's CPU
// time per request on each side, the steadier figure on a loaded machine.
//
//	go test -run '^$' -bench BenchmarkMachineReads -benchtime 1x ./services/gateway/service/
func BenchmarkMachineReads(b *testing.B) {
	n := eventstest.BenchSize(b, "machines", 100_000, 200)
	perGet := eventstest.BenchSize(b, "GETs of one machine per round", 6000, 60)
	perList := eventstest.BenchSize(b, "page reads per round", 600, 12)
	natsCalls := eventstest.BenchSize(b, "page reads over NATS", 1800, 32)
	// Tracing as the services set it up (telemetry.SetupTracing: W3C
	// trace context, an SDK tracer provider; no exporter unless
	// OTEL_EXPORTER_OTLP_ENDPOINT is set, and then no span recorded,
	// though every one is made and propagated), and the
	// registry and the gateway on connections of their own, as in a
	// deployment.
	stopTracing, err := telemetry.SetupTracing(context.Background(), "gateway-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stopTracing(context.Background()) })
	s := startStack(b, ownConns, shippedCaches)
	tn := s.tenants()
	loadMachines(b, s, "acme", n)
	var gets []string
	distinct := min(1000, n)
	for i := range distinct {
		gets = append(gets, "/api/v1/orgs/acme/machines/"+uuidN(i*(n/distinct)))
	}
	q := url.Values{"pool": {"pool-3"}, "selector": {"rack=r3"}, "limit": {"100"}}
	lists := []string{"/api/v1/orgs/acme/machines?" + q.Encode()}
	b.ResetTimer()
	for range b.N {
		compare(b, "get", s, tn.viewer, gets, perGet)
		compare(b, "list", s, tn.viewer, lists, perList)
		// what the registry alone serves over NATS (no HTTP, no gateway):
		// as the gateway asks for it (the page's bytes, not decoded), the
		// ceiling the gateway's list cannot pass; and decoded into Go
		// values, as other services' clients do
		reg := regapi.Client{NC: s.nc}
		ctx := context.Background()
		req := regapi.MachineList{Org: "acme", Pool: "pool-3", Selector: "rack=r3", Limit: 100}
		lat, wall := parallelCalls(b, 16, natsCalls, func() error {
			_, err := command.CallJSON(ctx, s.nc, regapi.SubjectMachineList, req)
			return err
		})
		b.ReportMetric(float64(len(lat))/wall.Seconds(), "list_registry_nats_req/s")
		b.Logf("list straight from the registry over NATS, %d calls: p50 %.2fms p99 %.2fms %.0f req/s", len(lat), pct(lat, 50), pct(lat, 99), float64(len(lat))/wall.Seconds())
		lat, wall = parallelCalls(b, 16, natsCalls, func() error {
			_, err := reg.ListMachines(ctx, req)
			return err
		})
		b.ReportMetric(float64(len(lat))/wall.Seconds(), "list_registry_nats_decoded_req/s")
		b.Logf("the same, decoded into Go values by the caller, %d calls: p50 %.2fms p99 %.2fms %.0f req/s", len(lat), pct(lat, 50), pct(lat, 99), float64(len(lat))/wall.Seconds())
	}
}

// processCPU is the CPU time the process has used (user and system, every
// thread: the client's side of the requests included, and whatever else
// the stack does meanwhile), which the load from other processes on the
// machine moves far less than it moves throughput.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func perRequest(cpu time.Duration, n int) float64 {
	return float64(cpu.Microseconds()) / float64(max(n, 1))
}

// parallelCalls runs fn total times on workers goroutines.
func parallelCalls(b *testing.B, workers, total int, fn func() error) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, total)
	wall, err := eventstest.Parallel(total, workers, func(i int) error {
		t0 := time.Now()
		err := fn()
		lat[i] = time.Since(t0)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return lat, wall
}

// readCacheCounts reads the gateway's read cache counters
// (anvil_gateway_read_cache_requests_total) from the process's metrics.
func readCacheCounts(b *testing.B) string {
	b.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "anvil_gateway_read_cache_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s %.0f", strings.Join(labels, " "), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
