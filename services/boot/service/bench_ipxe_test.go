package service_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/service"
)

// BenchmarkIgnitionFirstVsRenderPerRequest is BenchmarkBootStorm's cold
// storm: a machine's first /ignition with nothing rendered ahead (the
// revisions service renders Butane once per pool revision and specialises
// the template per machine), and again when warm, against a boot service
// that renders Butane on every request, in the same run (x_baseline_first,
// x_baseline_warm).
func BenchmarkIgnitionFirstVsRenderPerRequest(b *testing.B) { bootStorm(b, false) }

// matchboxProfile is what matchbox keeps per machine (a profile's boot
// section), in memory here.
type matchboxProfile struct {
	Kernel string
	Initrd []string
	Args   []string
}

// matchboxIPXE is matchbox's iPXE template (its http/ipxe.go).
var matchboxIPXE = template.Must(template.New("ipxe").Parse(`#!ipxe
kernel {{.Kernel}}{{range $arg := .Args}} {{$arg}}{{end}}
{{- range $element := .Initrd}}
initrd {{$element}}
{{- end}}
boot
`))

// matchboxLike does per request what matchbox does: look the machine's
// profile up by UUID and render the iPXE template, served by net/http.
type matchboxLike struct {
	mu       sync.RWMutex
	profiles map[string]matchboxProfile
}

func (m *matchboxLike) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.RLock()
	p, ok := m.profiles[r.URL.Query().Get("uuid")]
	m.mu.RUnlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if err := matchboxIPXE.Execute(w, p); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// BenchmarkIPXEVsMatchbox serves /ipxe to 10,000 known machines
// (ANVIL_BENCH_SCALE sets the size) that are assigned and targeted, over
// 64 connections, and the same requests to a matchbox-like handler
// (matchboxLike) in the same process, alternating: ipxe_per_s,
// baseline_per_s and their ratio x_baseline. Each machine has booted once
// before, as the machines of a rack that reboots have. from_memory is the
// default: they are answered from memory and their boots reported to the
// registry off the request path (reports_pending is the most that were
// queued); registry is --ipxe-known-ttl=-1, every /ipxe asking the
// registry, as before.
func BenchmarkIPXEVsMatchbox(b *testing.B) {
	b.Run("from_memory", func(b *testing.B) { ipxeVsMatchbox(b, true) })
	b.Run("registry", func(b *testing.B) { ipxeVsMatchbox(b, false) })
}

func ipxeVsMatchbox(b *testing.B, fromMemory bool) {
	n := eventstest.BenchSize(b, "machines", 10_000, 20)
	const conns = 64
	rounds := max(5, min(50_000/n, 50)) // enough requests per side to measure, in seconds when tiny
	s := newStack(b, func(o *stackOptions) {
		o.logLevel, o.registry = slog.LevelError, benchRegistry
		// Rendering Ignition ahead is not what this measures.
		o.boot = func(c *service.Config) {
			c.PrepareWorkers = -1
			if !fromMemory {
				c.IPXEKnownTTL = -1
			}
		}
	})
	enroll := s.org("acme")
	s.pool("acme", "workers")
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute}}
	// Bodies are read into pooled buffers: the client runs in the same
	// process, and what it allocates per answer is not what is measured.
	bufs := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	get := func(rawURL string) (string, error) {
		resp, err := client.Get(rawURL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		buf := bufs.Get().(*bytes.Buffer)
		defer bufs.Put(buf)
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %d %s", rawURL, resp.StatusCode, buf)
		}
		return buf.String(), err
	}
	// has reports whether a GET answers with a body that holds want,
	// without keeping the body.
	has := func(rawURL, want string) (bool, error) {
		resp, err := client.Get(rawURL)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		buf := bufs.Get().(*bytes.Buffer)
		defer bufs.Put(buf)
		buf.Reset()
		if _, err = buf.ReadFrom(resp.Body); err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %d %s", rawURL, resp.StatusCode, buf)
		}
		return bytes.Contains(buf.Bytes(), []byte(want)), err
	}
	ipxeURL := func(base string, i int) string {
		return base + "/ipxe?uuid=" + benchUUID(i) + "&mac=" + macN(i) + "&token=" + enroll
	}
	// Setup: every machine registers, is assigned and targeted, and boots
	// once; the matchbox-like handler gets a profile per machine with the
	// kernel, initrd and arguments anvil's boot script has.
	if _, err := eventstest.Parallel(n, conns, func(i int) error {
		script, err := get(ipxeURL(s.url, i))
		if err == nil && !strings.Contains(script, "waiting to be assigned") {
			err = fmt.Errorf("machine %d: not registered:\n%s", i, script)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := assignBenchMachines(s, n); err != nil {
		b.Fatal(err)
	}
	mb := &matchboxLike{profiles: map[string]matchboxProfile{}}
	if _, err := eventstest.Parallel(n, conns, func(i int) error {
		var script string
		var err error
		// The registry's projection may lag the assignment by a moment.
		for attempt := 0; attempt < 200; attempt++ {
			if script, err = get(ipxeURL(s.url, i)); err != nil || strings.Contains(script, "\nkernel ") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		k := kernelRe.FindStringSubmatch(script)
		in := initrdRe.FindStringSubmatch(script)
		if k == nil || in == nil {
			return fmt.Errorf("machine %d: no boot script:\n%s", i, script)
		}
		mb.mu.Lock()
		mb.profiles[benchUUID(i)] = matchboxProfile{Kernel: k[1], Args: strings.Fields(k[2]), Initrd: []string{in[1]}}
		mb.mu.Unlock()
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mbSrv := &http.Server{Handler: mb, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = mbSrv.Serve(ln) }()
	b.Cleanup(func() { _ = mbSrv.Close() })
	mbURL := "http://" + ln.Addr().String()
	// The services follow the setup's events (registrations, assignments,
	// targets): the storms are measured once they caught up, so that
	// neither side's rounds pay for that work.
	eventstest.WaitConsumersCaughtUp(b, s.env.JS, events.StreamName, 5*time.Minute)

	storm := func(base, want string) (time.Duration, error) {
		return eventstest.Parallel(n*rounds/2, conns, func(j int) error {
			ok, err := has(ipxeURL(base, j%n), want)
			if err == nil && !ok {
				err = fmt.Errorf("machine %d: not a boot script", j%n)
			}
			return err
		})
	}
	b.ResetTimer()
	for range b.N {
		// Alternate (anvil, baseline, baseline, anvil, twice), so that
		// neither side gets the quieter part of a run on a shared machine.
		var anvil, baseline time.Duration
		pending := 0
		for i := range 8 {
			if i%4 == 0 || i%4 == 3 {
				d, err := storm(s.url, "ignition.config.url=")
				if err != nil {
					b.Fatal(err)
				}
				anvil += d
				if s.boot.App.Known != nil {
					pending = max(pending, s.boot.App.Known.Pending())
				}
				continue
			}
			d, err := storm(mbURL, "ignition.config.url=")
			if err != nil {
				b.Fatal(err)
			}
			baseline += d
		}
		total := float64(2 * n * rounds)
		b.ReportMetric(float64(n), "machines")
		b.ReportMetric(total/anvil.Seconds(), "ipxe_per_s")
		b.ReportMetric(total/baseline.Seconds(), "baseline_per_s")
		b.ReportMetric(baseline.Seconds()/anvil.Seconds(), "x_baseline")
		b.ReportMetric(float64(pending), "reports_pending")
		b.Logf("%d known machines, %d requests each side over %d connections: anvil /ipxe %.0f req/s, matchbox-like %.0f req/s (%.2fx); %d boots queued for the registry at most",
			n, int(total), conns, total/anvil.Seconds(), total/baseline.Seconds(), baseline.Seconds()/anvil.Seconds(), pending)
	}
}
