package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/boot/app"
	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	regservice "github.com/anvil-fleet/anvil/services/registry/service"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// renderPerRequest is the baseline: it renders Butane to Ignition on every
// request, as matchbox does, with the same pool revision, join material and
// options as the revisions service.
type renderPerRequest struct {
	rev  pool.Revision
	join cluster.Join
	opts render.Options
}

func (r renderPerRequest) Ignition(_ context.Context, q app.IgnitionRequest) (app.Rendered, error) {
	m, err := pool.NewMachineRevision(q.Pool, r.rev, pool.MachineSettings{Hostname: q.Hostname, Labels: q.Labels})
	if err != nil {
		return app.Rendered{}, err
	}
	out, err := render.Render(render.Input{Machine: m, Revision: r.rev, Join: r.join, Options: r.opts})
	if err != nil {
		return app.Rendered{}, err
	}
	return app.Rendered{MachineRevisionID: m.ID, Ignition: out}, nil
}

// BenchmarkBootStorm powers on 10,000 simulated machines (ANVIL_BENCH_SCALE
// sets the size, docs/performance.md) against the real boot, registry and revisions services over real
// HTTP, 256 at a time:
//
//  1. first power-on: each fetches /boot.ipxe and /ipxe and registers
//     itself (the registry appends its events), and is told to wait;
//  2. (setup, not timed: each is assigned to the pool with revision 1)
//  3. first boot: each fetches /ipxe (kernel script with a per-boot
//     token), then /ignition. Every machine has its own hostname, so its
//     own machine revision, which is rendered once (by the revisions
//     service): "cold", when the machine asks; "prepared", ahead, when the
//     registry targeted it while its firmware slept in the wait loop (the
//     time that takes is reported, and the storm waits for it);
//  4. boot again: the same, with every machine revision cached.
//
// The baseline is /ignition for the same machines against a second boot
// service on the same stack whose renderer renders on every request
// (render.Render, as matchbox renders Butane per request), in the same run.
func BenchmarkBootStorm(b *testing.B) {
	b.Run("cold", func(b *testing.B) { bootStorm(b, false) })
	b.Run("prepared", func(b *testing.B) { bootStorm(b, true) })
}

func bootStorm(b *testing.B, prepare bool) {
	n := eventstest.BenchSize(b, "machines", 10_000, 20)
	workers := min(256, n)
	s := newStack(b, func(o *stackOptions) {
		o.logLevel = slog.LevelError
		o.registry = benchRegistry
		o.boot = func(c *service.Config) {
			// every machine revision of the storm stays cached (about 5 KiB each)
			c.IgnitionCacheBytes = 512 << 20
			if !prepare {
				c.PrepareWorkers = -1
			}
		}
	})
	enroll := s.org("acme")
	s.pool("acme", "workers")
	rev := benchRevision(b)
	base := renderPerRequest{rev: rev, join: cluster.Join{APIEndpoint: "https://api.workers.example:6443",
		BootstrapToken: secret.Secret(bootstrapTok), CACertHash: caHash},
		opts: s.renderOptions("1.33.4")}
	baseline := startBaseline(b, s, base)

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: workers, MaxIdleConnsPerHost: workers, IdleConnTimeout: time.Minute}}
	get := func(rawURL string) (string, error) {
		resp, err := client.Get(rawURL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 32<<10)
		for {
			k, err := resp.Body.Read(buf)
			sb.Write(buf[:k])
			if err != nil {
				break
			}
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %d %s", rawURL, resp.StatusCode, sb.String())
		}
		return sb.String(), nil
	}
	expand := func(u string, i int) string {
		return strings.ReplaceAll(strings.ReplaceAll(u, "${uuid}", benchUUID(i)), "${net0/mac:hexhyp}", macN(i))
	}

	b.ResetTimer()
	for range b.N {
		// 1. first power-on
		register, err := eventstest.Parallel(n, workers, func(i int) error {
			chain, err := get(s.url + "/boot.ipxe?token=" + enroll)
			if err != nil {
				return err
			}
			script, err := get(expand(chainTarget(b, chain), i))
			if err != nil {
				return err
			}
			if !strings.Contains(script, "waiting to be assigned") {
				return fmt.Errorf("machine %d: not registered:\n%s", i, script)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}

		// 2. setup: the rollout's part, not timed
		b.StopTimer()
		setupStart := time.Now()
		assign, err := assignBenchMachines(s, n)
		if err != nil {
			b.Fatal(err)
		}
		// While the machines sleep in their wait loop, the boot service
		// renders their Ignition ahead (when prepare is on).
		var prepared time.Duration
		if prepare {
			eventstest.Eventually(b, "every machine revision rendered ahead", 10*time.Minute, 50*time.Millisecond, func() (bool, string) {
				return s.boot.Cache.Len() >= n && s.boot.Preparer.Pending() == 0,
					fmt.Sprintf("%d of %d rendered, %d pending", s.boot.Cache.Len(), n, s.boot.Preparer.Pending())
			})
			prepared = time.Since(setupStart)
		}
		b.StartTimer()

		// 3. first boot: boot scripts, then Ignition (every machine has its
		// own hostname, so its own machine revision: one render each)
		bootScripts := func() (time.Duration, []string, error) {
			urls := make([]string, n)
			d, err := eventstest.Parallel(n, workers, func(i int) error {
				script, err := get(s.url + "/ipxe?uuid=" + benchUUID(i) + "&mac=" + macN(i) + "&token=" + enroll)
				if err != nil {
					return err
				}
				m := ignitionRe.FindStringSubmatch(script)
				if m == nil {
					return fmt.Errorf("machine %d: no boot script:\n%s", i, script)
				}
				urls[i] = m[1]
				return nil
			})
			return d, urls, err
		}
		fetchIgnition := func(urls []string, from, to string) (time.Duration, error) {
			return eventstest.Parallel(n, workers, func(i int) error {
				cfg, err := get(strings.Replace(urls[i], from, to, 1))
				if err == nil && !strings.Contains(cfg, "ac2_acme_mr-") {
					err = fmt.Errorf("machine %d: no credential in its config", i)
				}
				return err
			})
		}
		ipxeBoot, ignURLs, err := bootScripts()
		if err != nil {
			b.Fatal(err)
		}
		ignitionCold, err := fetchIgnition(ignURLs, "", "")
		if err != nil {
			b.Fatal(err)
		}

		// 4. the whole rack boots again (a power cycle, a reboot storm,
		// Ignition retrying): every machine revision is in the cache
		ipxeAgain, ignURLs, err := bootScripts()
		if err != nil {
			b.Fatal(err)
		}
		ignition, err := fetchIgnition(ignURLs, "", "")
		if err != nil {
			b.Fatal(err)
		}

		// the baseline: the same requests, rendered on every request
		b.StopTimer()
		baselineTime, err := fetchIgnition(ignURLs, s.url, "http://"+baseline.Addr)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		total := register + ipxeBoot + ignitionCold
		b.ReportMetric(float64(n), "machines")
		b.ReportMetric(register.Seconds(), "register_s")
		b.ReportMetric(float64(n)/register.Seconds(), "registrations/s")
		b.ReportMetric(float64(2*n)/register.Seconds(), "first_boot_req/s")
		b.ReportMetric(float64(n)/ipxeBoot.Seconds(), "ipxe_boot_req/s")
		b.ReportMetric(float64(n)/ignitionCold.Seconds(), "ignition_first_req/s")
		b.ReportMetric(float64(n)/ignition.Seconds(), "ignition_again_req/s")
		b.ReportMetric(float64(n)/baselineTime.Seconds(), "ignition_baseline_req/s")
		b.ReportMetric(baselineTime.Seconds()/ignitionCold.Seconds(), "x_baseline_first")
		b.ReportMetric(baselineTime.Seconds()/ignition.Seconds(), "x_baseline_warm")
		b.ReportMetric(total.Seconds(), "first_storm_s")
		if prepare {
			b.ReportMetric(prepared.Seconds(), "assign_and_prepare_s")
		}
		mode := "cold: nothing rendered before the machines ask"
		if prepare {
			mode = fmt.Sprintf("prepared: assigning and rendering ahead took %s while the machines slept", prepared.Round(time.Millisecond))
		}
		b.Logf("%d machines, %d at a time (%s). First power-on: /boot.ipxe + /ipxe, all registered in %s (%.0f machines/s); "+
			"setup (assign, untimed) %s; first boot: /ipxe %s (%.0f req/s), /ignition %s (%.0f req/s); "+
			"first storm total %s. Boot again: /ipxe %s (%.0f req/s), /ignition %s (%.0f req/s). "+
			"Render-per-request baseline /ignition %s (%.0f req/s): first boot %.1fx, again %.1fx",
			n, workers, mode, register.Round(time.Millisecond), float64(n)/register.Seconds(), assign.Round(time.Millisecond),
			ipxeBoot.Round(time.Millisecond), float64(n)/ipxeBoot.Seconds(), ignitionCold.Round(time.Millisecond), float64(n)/ignitionCold.Seconds(),
			total.Round(time.Millisecond), ipxeAgain.Round(time.Millisecond), float64(n)/ipxeAgain.Seconds(),
			ignition.Round(time.Millisecond), float64(n)/ignition.Seconds(),
			baselineTime.Round(time.Millisecond), float64(n)/baselineTime.Seconds(),
			baselineTime.Seconds()/ignitionCold.Seconds(), baselineTime.Seconds()/ignition.Seconds())
		if s.boot.Cache != nil {
			b.Logf("Ignition cache: %d entries", s.boot.Cache.Len())
		}
	}
}

// benchRegistry lets a whole rack register at once (the enrollment rate
// limit is not what the benchmarks measure).
func benchRegistry(c *regservice.Config) { c.EnrollmentRate = -1 }

// assignBenchMachines assigns the registered bench machines 0..n-1 of acme
// to pool workers with target revision 1 (the rollout's part).
func assignBenchMachines(s *stack, n int) (time.Duration, error) {
	return eventstest.Parallel(n, 64, func(i int) error {
		for _, c := range []regapi.MachineCommand{regapi.AssignToPool{Pool: "workers"}, regapi.SetTargetRevision{Revision: 1}} {
			for attempt := 0; ; attempt++ {
				_, err := s.reg.Machine(s.ctx, "acme", benchUUID(i), c, 0)
				if err == nil {
					break
				}
				// The registry decides on its projection, which may
				// lag the storm by a moment (a machine it has not
				// applied yet does not exist).
				if !errs.Is(err, errs.KindNotFound) && !strings.Contains(err.Error(), "does not exist") || attempt > 100 {
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return nil
	})
}

func benchUUID(i int) string { return fmt.Sprintf("5a5a5a5a-0000-4000-8000-%012x", i+1) }

// benchRevision is revision 1 of the bench pool as the revisions service
// holds it (poolSpec with the resolved Kubernetes version).
func benchRevision(b *testing.B) pool.Revision {
	spec := poolSpec("4230.2.3")
	cfg := pool.Config{
		Kubernetes: pool.Kubernetes{Minor: spec.Kubernetes.Minor, Version: "1.33.4"},
		Flatcar:    pool.Flatcar{Channel: spec.Flatcar.Channel, Version: spec.Flatcar.Version},
		NodeLabels: spec.NodeLabels,
	}.Normalize()
	rev := pool.Revision{Number: 1, Hash: cfg.Hash(), Config: cfg}
	if _, err := render.Render(render.Input{}); err == nil {
		b.Fatal("render accepted an empty input")
	}
	return rev
}

// startBaseline runs a second boot service on the stack whose renderer
// renders on every request.
func startBaseline(b *testing.B, s *stack, r renderPerRequest) *service.Service {
	ready := make(chan *service.Service, 1)
	// A render-per-request server renders nothing ahead (matchbox does
	// not): with the default worker, the baseline rendered every assigned
	// machine's Ignition in the background, on the cores the boot
	// service's storms were being measured on (a fifth of the CPU of the
	// first /ignition storm).
	cfg := service.Config{Config: svc.Config{Service: service.Name}, Listen: "127.0.0.1:0", SigningKeys: signingKey,
		AssetBaseURL: "http://mirror.test/flatcar", PrepareWorkers: -1}
	var bs *service.Service
	s.run("boot-baseline", func(ctx context.Context) error {
		return service.Start(ctx, cfg, svc.Options{Conn: s.conn(), Logger: slog.New(slog.DiscardHandler)},
			service.Hooks{Ready: ready, Renderer: r})
	}, func() { bs = <-ready })
	return bs
}
