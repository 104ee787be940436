package service_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// BenchmarkRenderViaNATS measures machine renders through the NATS command
// path (api.RenderMachine → ports → app → render cache), for machine
// revisions seen for the first time (a render each) and for a machine
// revision already rendered (served from the cache), against a baseline
// measured in the same run: render.Render on every request without a
// cache, in-process (no NATS at all), which is how matchbox serves every
// request. Rounds alternate so that drift on a shared machine hits every
// side alike.
func BenchmarkRenderViaNATS(b *testing.B) {
	h := newHarness(b)
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)
	rev, err := api.GetRevision(h.ctx, h.nc, api.GetRevisionRequest{Org: "acme", Pool: "workers", Revision: 1})
	if err != nil {
		b.Fatal(err)
	}
	baseline := baselineInput(b, rev.Hash, h.renderOptions("1.33.4"))
	req := func(hostname string) api.RenderMachineRequest {
		return api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: hostname, Labels: map[string]string{"anvil.dev/slot": "7"}}
	}
	// The baseline renders exactly what the service serves.
	warm, err := api.RenderMachine(h.ctx, h.nc, req("cached"))
	if err != nil {
		b.Fatal(err)
	}
	if base, err := render.Render(baseline("cached")); err != nil || !sameJSON(base, warm.Ignition) {
		b.Fatalf("the baseline renders something else than the service: %v", err)
	}

	n := max(b.N, eventstest.BenchSize(b, "renders of each kind", 60, 6))
	const rounds = 3
	per := n / rounds
	var firstDur, cachedDur, baseDur time.Duration
	b.ResetTimer()
	for r := range rounds {
		start := time.Now()
		for i := range per {
			if _, err := api.RenderMachine(h.ctx, h.nc, req(fmt.Sprintf("first-%d-%d", r, i))); err != nil {
				b.Fatal(err)
			}
		}
		firstDur += time.Since(start)
		start = time.Now()
		for range per {
			if _, err := api.RenderMachine(h.ctx, h.nc, req("cached")); err != nil {
				b.Fatal(err)
			}
		}
		cachedDur += time.Since(start)
		start = time.Now()
		for i := range per {
			if _, err := render.Render(baseline(fmt.Sprintf("base-%d-%d", r, i))); err != nil {
				b.Fatal(err)
			}
		}
		baseDur += time.Since(start)
	}
	b.StopTimer()
	total := float64(per * rounds)
	b.ReportMetric(total/firstDur.Seconds(), "first_renders/s")
	b.ReportMetric(total/cachedDur.Seconds(), "cached_renders/s")
	b.ReportMetric(total/baseDur.Seconds(), "baseline_renders/s")
	b.ReportMetric(baseDur.Seconds()/cachedDur.Seconds(), "cached_vs_baseline")
	b.ReportMetric(baseDur.Seconds()/firstDur.Seconds(), "first_vs_baseline")
	b.Logf("%d first renders over NATS in %s, %d cached in %s, %d render-per-request baseline renders in %s, in %d alternating rounds; first %.1fx, cached %.1fx the baseline",
		int(total), firstDur.Round(time.Millisecond), int(total), cachedDur.Round(time.Millisecond), int(total), baseDur.Round(time.Millisecond), rounds,
		baseDur.Seconds()/firstDur.Seconds(), baseDur.Seconds()/cachedDur.Seconds())
}

// baselineInput builds, with the domain alone, the render input of the
// benchmark's pool revision for a hostname; it checks that the revision is
// the one the service made (same hash).
func baselineInput(b *testing.B, hash string, opts render.Options) func(hostname string) render.Input {
	b.Helper()
	raw, err := json.Marshal(testSpec()) // api.PoolSpec and pool.Spec share their JSON
	if err != nil {
		b.Fatal(err)
	}
	var spec pool.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		b.Fatal(err)
	}
	cfg := spec.Config
	cfg.Kubernetes.Version = "1.33.4"
	cfg = cfg.Normalize()
	rev := pool.Revision{Number: 1, Hash: cfg.Hash(), Config: cfg}
	if rev.Hash != hash {
		b.Fatalf("baseline revision hash %s, the service's %s", rev.Hash, hash)
	}
	join := cluster.Join{APIEndpoint: "https://api.prod.example:6443", BootstrapToken: secret.Secret(testToken), CACertHash: testCAHash}
	return func(hostname string) render.Input {
		m, err := pool.NewMachineRevision("workers", rev, pool.MachineSettings{Hostname: hostname, Labels: map[string]string{"anvil.dev/slot": "7"}})
		if err != nil {
			b.Fatal(err)
		}
		return render.Input{Machine: m, Revision: rev, Join: join, Options: opts}
	}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
