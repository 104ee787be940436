package service_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/adapters"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
	"github.com/anvil-fleet/anvil/services/rollout/service"
	"github.com/anvil-fleet/anvil/sim"
)

// memNetworkFrom is the fleet size above which the simulated fleet
// reaches the boot service in memory: two file descriptors per agent's
// long poll (both ends in this process) would pass the usual limit of
// open files (20,000 on these machines) at 10,000 machines, while at
// 1,000 loopback TCP costs less CPU than net.Pipe (47 s against 40 s for
// the 1,000-machine rollout, three runs against two).
const memNetworkFrom = 4000

// BenchmarkRollout1000 rolls out 1,000 simulated machines (ANVIL_BENCH_SCALE
// sets the size, docs/performance.md) whose reboot takes no time, with
// maxUnavailable 10%, against the real kube-apiserver and the real
// services. Before it starts, every machine is ready at the first revision,
// online, and has a Ready Node, so every machine must go through cordon and
// drain; it fails if one with a Node skipped them. It reports the rollout's
// wall time (total_s) and, as the floor measured in the same run, the time
// the bare external work takes with the same parallelism (floor_s): per
// machine a cordon and an uncordon patch on the real API server, with a
// client of the rollout's limits, and one raw JetStream publish per event
// the rollout appends; the Kubernetes side of the rollout alone
// (kube_floor_s, see kubeFloor); how long its driver spent appending
// (append_s); and
// how many machines took each path (cordoned and drained, provisioned
// without a node). Where a machine's time went, step by step, the
// appends' figures, and the CPU each process used during the rollout and
// during the Kubernetes floor are printed to stderr.
//
//	go test ./services/rollout/service -run '^$' -bench 'Rollout1000$' -benchtime 1x -timeout 30m
func BenchmarkRollout1000(b *testing.B) { benchRollout(b, 1000) }

// BenchmarkRollout10000 is BenchmarkRollout1000 with 10,000 machines
// (on two cores their setup alone takes 6 to 15 minutes, the rollout 4
// to 11, its two floors 3 to 4):
//
//	go test ./services/rollout/service -run '^$' -bench 'Rollout10000$' -benchtime 1x -timeout 150m
func BenchmarkRollout10000(b *testing.B) { benchRollout(b, 10000) }

// benchNodeLease is the simulated kubelets' node lease in the rollout
// benchmarks: renewed every minute.
const benchNodeLease = 4 * time.Minute

// benchKubeGOGC is the Kubernetes processes' GOGC in the rollout
// benchmarks: at Go's default (100) the API server's garbage collector
// took 12.5% of its CPU during a rollout of 1,000, on the cores the
// rollout runs on; a workload cluster's control plane runs on its own.
const benchKubeGOGC = "GOGC=400"

// benchKubeOptions are the rollout benchmarks' control plane settings.
func benchKubeOptions() []kubeharness.Option {
	opts := []kubeharness.Option{kubeharness.WithNodeLeaseDuration(benchNodeLease)}
	for _, c := range []string{kubeharness.Etcd, kubeharness.KubeAPIServer, kubeharness.KubeControllerManager, kubeharness.KubeScheduler, kubeharness.Kwok} {
		opts = append(opts, kubeharness.WithEnv(c, benchKubeGOGC))
	}
	return opts
}

func benchRollout(b *testing.B, full int) {
	n := eventstest.BenchSize(b, "machines", full, 5)
	// The waits of the setup grow with the fleet: every thousand machines
	// take two to three minutes to boot and provision on two cores, more
	// when the machine is shared (10,000 were 5,737 done after 30 minutes
	// beside another benchmark); the setup is not what is measured.
	within := time.Duration(max(1, (n+999)/1000)) * 6 * time.Minute
	// The agents heartbeat and long-poll as the agent does by default
	// (every 30 s ±20%, 30 s polls) and the registry marks a machine
	// offline after its default 90 s of silence: a fleet's background
	// chatter at its real rate, well apart from the offline mark so that
	// no machine is offline at the rollout's sanity check however loaded
	// the machine running the benchmark is.
	const heartbeat, pollWait, offline = 30 * time.Second, 30 * time.Second, 90 * time.Second
	// The rollout's client and the floor's get the fleet's limits: with
	// the default 200 requests/s both would be bound by their client's
	// rate limiter, not by the work.
	const qps, burst = 2000, 4000
	// The fleet registers with one enrollment token: at the registry's
	// default bound (10 new machines a second) the setup of 10,000 would
	// take 17 minutes of admissions, and the machines told to wait would
	// flood it with retries. Registration is not what this measures.
	// The rollout service's default lease (15 s) rather than the tests'
	// 3 s: on two loaded cores a KV renewal sometimes takes longer than
	// the 2.5 s a 3 s lease allows, and each lost lease stops the driver.
	// The simulated kubelets renew their node leases every minute, not
	// every 10 s: the test's Kubernetes control plane shares the two cores
	// with what it measures, and 10,000 kubelets renewing at a real
	// kubelet's rate are 1,000 lease writes a second that, in production,
	// the workload cluster's own control plane carries.
	s := newStackWith(b, stackOptions{offlineAfter: offline, kubeQPS: qps, kubeBurst: burst,
		enrollmentRate: 1000, enrollmentBurst: n, leaseTTL: 15 * time.Second,
		kube: append(benchKubeOptions(), profileKubeOptions()...)})
	org, pool := "bench", "bench"
	tok := s.org(org)
	s.cluster(org, "c1")
	// The fleet's own Kubernetes client, with a limit for 1,000 kubelets:
	// the harness's shared one (200 requests/s) would bound the rollout by
	// the simulator's Node updates, not by the rollout's own calls.
	kube, err := sim.KubeletClient(s.cp.RESTConfig(), qps, burst)
	must(b, err)
	fleet := s.fleetFor(tok, func(c *sim.Config) {
		c.Kube = kube
		c.MaxWait = 2 * time.Second
		c.AgentIntervals = sim.TestIntervals()
		c.AgentIntervals.Heartbeat = heartbeat
		// The hardware report at the agent's default interval (5 min),
		// as the heartbeat and poll: at one a minute, 10,000 simulated
		// agents reading their fake /sys were 14% of this process's CPU.
		c.AgentIntervals.Report = 0
		c.AgentIntervals.PollWait = pollWait
		if n > memNetworkFrom {
			c.HTTPClient = s.fleetNet.HTTPClient()
		}
	})
	setup := time.Now()
	s.machines(org, pool, fleet, n)
	strat := steady("10%")
	s.createPoolWithin(org, pool, "c1", poolSpec("1", strat), within)
	b.Logf("setup: %d machines booted and provisioned in %s", n, time.Since(setup).Round(time.Second))

	for i := 0; i < b.N; i++ {
		b.StopTimer()
		nodes := s.allJoined(org, pool, n, uint64(i+1), within)
		b.StartTimer()
		start := time.Now()
		appendsBefore := rolloutAppends(b)
		kubeBefore, commandsBefore, waitsBefore := rolloutKubeCalls(b), commandCalls(b), instructionWaits(b)
		cpuBefore := s.sampleCPU(b)
		stopProfile := s.profileRollout(b, i+1)
		rev := s.apply(org, pool, poolSpec(fmt.Sprint(i+2), strat))
		stop := s.progress(org, pool, uint64(rev))
		r := s.waitRollout(org, pool, uint64(rev), within, api.StatusSucceeded)
		total := time.Since(start)
		cpuAfter := s.sampleCPU(b)
		stopProfile()
		appends := rolloutAppends(b).since(appendsBefore)
		kubeCalls := "the rollout service's Kubernetes calls (as its client timed them): " + rolloutKubeCalls(b).report(kubeBefore, 8)
		commands := "calls between the services (as their callers timed them; most time in all first): " + commandCalls(b).report(commandsBefore, 10)
		waits := "reboot instructions, from the rollout's request to each stage (the boot service's anvil_boot_instruction_wait_seconds): " +
			instructionWaits(b).report(waitsBefore, 4)
		stop()
		b.StopTimer()
		if r.Progress.Done != n {
			b.Fatalf("progress %+v", r.Progress)
		}
		paths := s.rolloutPaths(org, r.ID)
		if paths.done != n || paths.cordonedDrained+paths.noNode+paths.skipped != n {
			b.Fatalf("rollout %s: %d machines done of %d; %+v", r.ID, paths.done, n, paths)
		}
		var skipped []string
		for _, host := range paths.skippedHosts {
			if nodes[host] {
				skipped = append(skipped, host)
			}
		}
		if len(skipped) > 0 || paths.noNode > 0 {
			b.Fatalf("rollout %s: %d machines went through as \"no node\" and %d skipped cordon or drain although their Node existed: %s",
				r.ID, paths.noNode, len(skipped), strings.Join(skipped[:min(len(skipped), 10)], ", "))
		}
		events := s.countEvents(org, r.ID)
		floor := s.baseline(b, kube, pool, n, events/n)
		kubeBefore2 := s.sampleCPU(b)
		kubeFloor := s.kubeFloor(b, kube, pool, n)
		if b.Failed() {
			b.FailNow() // a floor whose requests failed is no floor
		}
		kubeFloorCPU := cpuReport("the Kubernetes floor", kubeBefore2, s.sampleCPU(b), kubeFloor, n)
		b.ReportMetric(total.Seconds(), "total_s")
		b.ReportMetric(floor.Seconds(), "floor_s")
		b.ReportMetric(total.Seconds()/floor.Seconds(), "x_floor")
		b.ReportMetric(kubeFloor.Seconds(), "kube_floor_s")
		b.ReportMetric(total.Seconds()/kubeFloor.Seconds(), "x_kube_floor")
		b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/machine")
		b.ReportMetric(float64(paths.cordonedDrained), "cordoned_drained")
		b.ReportMetric(float64(paths.noNode), "no_node")
		// One rollout's events are appended one after the other (each
		// publish waits for the previous one's sequence): the time its
		// driver spent appending is the part of total_s that the floor's
		// parallel publishes do not have.
		b.ReportMetric(appends.seconds, "append_s")
		b.Logf("rollout %s of %d machines (revision %d, maxUnavailable 10%%, instant reboots): %s, %.1f ms per machine, %d events (version %d); "+
			"floor (the bare Kubernetes patches and raw appends, same parallelism): %s, %.1fx; "+
			"paths: %d cordoned and drained, %d provisioned without a node, %d skipped cordon or drain; %d of %d with a Node before it began",
			r.ID, n, rev, total.Round(time.Millisecond), float64(total.Milliseconds())/float64(n), events, r.Version,
			floor.Round(time.Millisecond), total.Seconds()/floor.Seconds(),
			paths.cordonedDrained, paths.noNode, paths.skipped, len(nodes), n)
		// On stderr: a benchmark's log is cut after ten lines.
		fmt.Fprintf(os.Stderr, "rollout %s: where a machine's time goes (from the events' decision times; mean / p50 / p90 / max):\n%s\n"+
			"  appends to rollouts: %d appends of %d events, %.1f s in all (%.0f%% of the rollout's wall time), %.2f ms per event; "+
			"chained appends whose chain broke, the rest of their events sent again (all services): %d\n  %s\n  %s\n  %s\n%s\n",
			r.ID, s.stepTimings(org, r.ID, start), appends.appends, appends.events, appends.seconds,
			100*appends.seconds/total.Seconds(), 1000*appends.seconds/max(float64(appends.events), 1), appends.chainBreaks,
			kubeCalls, commands, waits, cpuReport("the rollout", cpuBefore, cpuAfter, total, n))
		fmt.Fprintf(os.Stderr, "rollout %s: the Kubernetes floor (the requests a machine's rollout makes or causes, bare, same parallelism; no rollout running, anvil's services answering the idle fleet): %s, the rollout %.2fx it\n%s\n",
			r.ID, kubeFloor.Round(time.Millisecond), total.Seconds()/kubeFloor.Seconds(), kubeFloorCPU)
		b.StartTimer()
	}
}

// allJoined waits until every one of the n machines of pool is ready at
// revision in the registry and online, and has a Ready Node (the simulated
// kubelet joined), so that a rollout goes through cordon and drain for
// each; it returns the pool's Nodes.
func (s *stack) allJoined(org, pool string, n int, revision uint64, within time.Duration) map[string]bool {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%d machines of %s ready at revision %d, online", n, pool, revision), within, func() (bool, string) {
		ms := s.registryMachines(org, pool)
		if len(ms) != n {
			return false, fmt.Sprintf("%d machines in the registry", len(ms))
		}
		for host, m := range ms {
			if m.Status != regapi.StatusReady || m.CurrentRevision != revision || m.Connectivity != regapi.Online {
				return false, fmt.Sprintf("%s: %s at revision %d, %s", host, m.Status, m.CurrentRevision, m.Connectivity)
			}
		}
		return true, ""
	})
	nodes := map[string]bool{}
	s.eventually(fmt.Sprintf("%d Nodes of %s Ready", n, pool), within, func() (bool, string) {
		list, err := s.cp.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(nodes)
		notReady := ""
		for i := range list.Items {
			node := &list.Items[i]
			if !strings.HasPrefix(node.Name, pool+"-") {
				continue
			}
			nodes[node.Name] = true
			if !kubeharness.NodeIsReady(node) && notReady == "" {
				notReady = node.Name
			}
		}
		switch {
		case len(nodes) != n:
			return false, fmt.Sprintf("%d Nodes", len(nodes))
		case notReady != "":
			return false, notReady + " is not Ready"
		}
		return true, ""
	})
	return nodes
}

// paths counts, from a rollout's events, how the machines went through it.
type paths struct {
	done            int // rollout.machine_done
	cordonedDrained int // both cordon and drain succeeded
	noNode          int // started without a node: provisioned, no cordon or drain
	skipped         int // had a node by the rollout's start, yet missed cordon or drain
	skippedHosts    []string
}

// rolloutPaths replays a rollout's events and counts the machines by path.
func (s *stack) rolloutPaths(org, id string) paths {
	s.t.Helper()
	type seen struct {
		host                    string
		noNode, cordon, drained bool
	}
	ms := map[string]*seen{}
	var p paths
	err := s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "rollout", AggregateID: id},
		events.Position{}, events.Position{}, func(env *events.Envelope) error {
			switch env.Type {
			case rollout.Started{}.EventType():
				var e rollout.Started
				if err := json.Unmarshal(env.Payload, &e); err != nil {
					return err
				}
				for _, m := range e.Machines {
					ms[m.UUID] = &seen{host: m.Hostname, noNode: m.NoNode}
				}
			case rollout.StepSucceeded{}.EventType():
				var e rollout.StepSucceeded
				if err := json.Unmarshal(env.Payload, &e); err != nil {
					return err
				}
				if m := ms[e.Machine]; m != nil {
					m.cordon = m.cordon || e.Step == rollout.StepCordon
					m.drained = m.drained || e.Step == rollout.StepDrain
				}
			case rollout.MachineDone{}.EventType():
				p.done++
			}
			return nil
		})
	must(s.t, err)
	for _, m := range ms {
		switch {
		case m.cordon && m.drained:
			p.cordonedDrained++
		case m.noNode:
			p.noNode++
		default:
			p.skipped++
			p.skippedHosts = append(p.skippedHosts, m.host)
		}
	}
	sort.Strings(p.skippedHosts)
	return p
}

// span is a set of durations of one kind, for the benchmark's breakdown.
type span []time.Duration

func (s span) String() string {
	if len(s) == 0 {
		return "-"
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	at := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/1000) }
	return fmt.Sprintf("%s / %s / %s / %s ms (%d)", ms(sum/time.Duration(len(sorted))), ms(at(0.5)), ms(at(0.9)), ms(sorted[len(sorted)-1]), len(sorted))
}

// stepTimings replays a rollout's events and says where a machine's time
// went: each step from its start to its outcome (the executor's work and
// the wait for its report to be decided), each gap between one step's
// outcome and the next one's start (the planner's turn and the append of
// the start), and the rollout's own phases from the apply at applied.
func (s *stack) stepTimings(org, id string, applied time.Time) string {
	s.t.Helper()
	type machine struct {
		begun, last time.Time // last: the latest outcome (or begun)
		started     time.Time // the running step's start
	}
	ms := map[string]*machine{}
	steps, gaps := map[rollout.Step]span{}, map[rollout.Step]span{}
	var started, checked, firstBegun, lastDone, finished time.Time
	var toDone, doneGap span
	reg := service.NewRegistry()
	err := s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "rollout", AggregateID: id},
		events.Position{}, events.Position{}, func(env *events.Envelope) error {
			p, err := reg.Decode(env)
			if err != nil {
				return err
			}
			switch e := p.(type) {
			case rollout.Started:
				started = e.At
			case rollout.ChecksRecorded:
				checked = e.At
			case rollout.MachineBegun:
				ms[e.Machine] = &machine{begun: e.At, last: e.At}
				if firstBegun.IsZero() {
					firstBegun = e.At
				}
			case rollout.StepStarted:
				if m := ms[e.Machine]; m != nil {
					gaps[e.Step] = append(gaps[e.Step], e.At.Sub(m.last))
					m.started = e.At
				}
			case rollout.StepSucceeded:
				if m := ms[e.Machine]; m != nil {
					steps[e.Step] = append(steps[e.Step], e.At.Sub(m.started))
					m.last = e.At
				}
			case rollout.MachineDone:
				if m := ms[e.Machine]; m != nil {
					doneGap = append(doneGap, e.At.Sub(m.last))
					toDone = append(toDone, e.At.Sub(m.begun))
				}
				lastDone = e.At
			case rollout.Succeeded:
				finished = e.At
			}
			return nil
		})
	must(s.t, err)
	var b strings.Builder
	fmt.Fprintf(&b, "  rollout: apply → started %s, → checks recorded %s, → first machine begun %s, last machine done → succeeded %s\n",
		started.Sub(applied).Round(time.Millisecond), checked.Sub(started).Round(time.Millisecond),
		firstBegun.Sub(checked).Round(time.Millisecond), finished.Sub(lastDone).Round(time.Millisecond))
	fmt.Fprintf(&b, "  machine begun → done: %s\n", toDone)
	for _, st := range rollout.Steps {
		fmt.Fprintf(&b, "  gap before %-10s %s\n  %-21s %s\n", st+":", gaps[st], st+":", steps[st])
	}
	fmt.Fprintf(&b, "  gap before done:      %s", doneGap)
	return b.String()
}

// envRolloutProfile names a directory where the benchmark writes CPU
// profiles of the rollout alone (-cpuprofile covers the setup too, which
// takes most of the run): this process's (the anvil services, nats-server,
// the simulated fleet) and the API server's, which shares the cores.
const envRolloutProfile = "ANVIL_BENCH_ROLLOUT_PROFILE"

// apiServerProfileSeconds is the length of each of the API server's CPU
// profiles: it profiles for a fixed time, so the rollout is covered by
// profiles one after the other, which pprof reads together (the last,
// cut off by the rollout's end, is lost).
const apiServerProfileSeconds = 5

// profileKubeOptions turns the API server's profiling on when
// envRolloutProfile asks for profiles.
func profileKubeOptions() []kubeharness.Option {
	if os.Getenv(envRolloutProfile) == "" {
		return nil
	}
	// WithArgs's flags come after the harness's --profiling=false: they win.
	return []kubeharness.Option{kubeharness.WithArgs(kubeharness.KubeAPIServer, "--profiling=true")}
}

// profileRollout starts the rollout's CPU profiles if envRolloutProfile
// asks for them, and returns what stops them. iteration names the files.
func (s *stack) profileRollout(b *testing.B, iteration int) (stop func()) {
	dir := os.Getenv(envRolloutProfile)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("rollout-cpu-%d.pprof", iteration)))
	must(b, err)
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Logf("%s: %v (is -cpuprofile set?)", envRolloutProfile, err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(s.ctx)
	b.Cleanup(cancel) // if the rollout fails before stop
	type result struct {
		files []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		files, err := s.profileAPIServer(ctx, filepath.Join(dir, fmt.Sprintf("apiserver-cpu-%d", iteration)))
		done <- result{files, err}
	}()
	return func() {
		pprof.StopCPUProfile()
		must(b, f.Close())
		cancel()
		r := <-done
		if r.err != nil {
			b.Logf("the API server's CPU profile: %v", r.err)
		}
		b.Logf("the rollout's CPU profile: %s; the API server's: %s (go tool pprof -top reads them together)", f.Name(), strings.Join(r.files, " "))
	}
}

// profileAPIServer writes the API server's CPU profiles, one after the
// other, to prefix-NNN.pprof until ctx ends; the one cut off by the end is
// not written.
func (s *stack) profileAPIServer(ctx context.Context, prefix string) (files []string, err error) {
	for i := 1; ctx.Err() == nil; i++ {
		raw, err := s.cp.Client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(apiServerProfileSeconds)).DoRaw(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return files, nil
			}
			return files, err
		}
		name := fmt.Sprintf("%s-%03d.pprof", prefix, i)
		if err := os.WriteFile(name, raw, 0o644); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

// appendStats are the event store's own counts of the appends to rollouts
// (anvil_events_append_duration_seconds and anvil_events_appended_total):
// one rollout's appends are made one after the other, so their time is
// how long its driver waited on the store.
type appendStats struct {
	appends, events int
	seconds         float64
	// chainBreaks counts, for every appender of the process, the chained
	// appends whose chain broke: an event refused because another message
	// landed before it, and it and the rest of its burst sent again.
	chainBreaks int
}

func (a appendStats) since(b appendStats) appendStats {
	return appendStats{appends: a.appends - b.appends, events: a.events - b.events, seconds: a.seconds - b.seconds,
		chainBreaks: a.chainBreaks - b.chainBreaks}
}

func rolloutAppends(b *testing.B) appendStats {
	families, err := prometheus.DefaultGatherer.Gather()
	must(b, err)
	var out appendStats
	for _, f := range families {
		if f.GetName() == "anvil_events_append_chain_breaks_total" {
			out.chainBreaks = int(f.GetMetric()[0].GetCounter().GetValue())
		}
		for _, m := range f.GetMetric() {
			rollout := false
			for _, l := range m.GetLabel() {
				rollout = rollout || l.GetName() == "aggregate" && l.GetValue() == "rollout"
			}
			if !rollout {
				continue
			}
			switch f.GetName() {
			case "anvil_events_append_duration_seconds":
				out.appends += int(m.GetHistogram().GetSampleCount())
				out.seconds += m.GetHistogram().GetSampleSum()
			case "anvil_events_appended_total":
				out.events += int(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

// callStats are the calls a histogram of the process counted, by the
// values of some of its labels joined ("patch nodes"): how many, and their
// seconds in all.
type callStats map[string]struct {
	calls   int
	seconds float64
}

// histogramCalls reads family from the process's metrics, keyed by the
// values of labels.
func histogramCalls(b testing.TB, family string, labels ...string) callStats {
	families, err := prometheus.DefaultGatherer.Gather()
	must(b, err)
	out := callStats{}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			var key []string
			for _, want := range labels {
				for _, l := range m.GetLabel() {
					if l.GetName() == want {
						key = append(key, l.GetValue())
					}
				}
			}
			k := strings.Join(key, " ")
			c := out[k]
			c.calls += int(m.GetHistogram().GetSampleCount())
			c.seconds += m.GetHistogram().GetSampleSum()
			out[k] = c
		}
	}
	return out
}

// rolloutKubeCalls are the rollout service's Kubernetes calls by verb and
// resource, from its anvil_rollout_kube_request_duration_seconds, as its
// client saw them.
func rolloutKubeCalls(b *testing.B) callStats {
	return histogramCalls(b, "anvil_rollout_kube_request_duration_seconds", "verb", "resource")
}

// commandCalls are the calls between the services by subject, from the
// callers' anvil_command_request_duration_seconds: where a step waits on
// another service.
func commandCalls(b testing.TB) callStats {
	return histogramCalls(b, "anvil_command_request_duration_seconds", "subject")
}

// instructionWaits are the boot service's reboot instructions by stage
// (stored, delivered, accepted), each timed from the rollout's request.
func instructionWaits(b *testing.B) callStats {
	return histogramCalls(b, "anvil_boot_instruction_wait_seconds", "stage")
}

// report is one line: each kind of call since before, with its count and
// mean latency, those that took the most time in all first, at most top.
func (s callStats) report(before callStats, top int) string {
	type row struct {
		kind    string
		calls   int
		seconds float64
	}
	var rows []row
	for k, c := range s {
		if n := c.calls - before[k].calls; n > 0 {
			rows = append(rows, row{k, n, c.seconds - before[k].seconds})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.seconds, a.seconds) })
	parts := make([]string, 0, min(len(rows), top))
	for _, r := range rows[:min(len(rows), top)] {
		parts = append(parts, fmt.Sprintf("%s %d (%.0f ms mean)", r.kind, r.calls, 1000*r.seconds/float64(r.calls)))
	}
	return strings.Join(parts, ", ")
}

// countEvents counts the events on a rollout's subject.
func (s *stack) countEvents(org, id string) int {
	n := 0
	err := s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "rollout", AggregateID: id},
		events.Position{}, events.Position{}, func(*events.Envelope) error { n++; return nil })
	must(s.t, err)
	return n
}

// baselineTimeout bounds each floor's work as a whole (see baseline and
// kubeFloor).
const baselineTimeout = 30 * time.Minute

// baseline does the bare external work of a rollout with the same
// parallelism (maxUnavailable machines at a time): a cordon and an
// uncordon patch per node with kube (a client with the rollout's limits),
// and perMachine raw JetStream publishes.
func (s *stack) baseline(b *testing.B, kube kubernetes.Interface, pool string, n, perMachine int) time.Duration {
	js, err := jetstream.New(s.nc)
	must(b, err)
	// One deadline for the whole floor instead of each publish's default
	// 5 s (the patches have none of their own): the floor measures how
	// long the work takes, and at 10,000 machines on two loaded cores
	// (1,000 synchronous publishes queued at once while the fleet's agents
	// keep heartbeating) a publish waited more than 5 s for its answer,
	// which failed the benchmark after a rollout that had succeeded.
	ctx, cancel := context.WithTimeout(s.ctx, baselineTimeout)
	defer cancel()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}, Storage: jetstream.FileStorage})
	must(b, err)
	return eachMachine(pool, n, func(i int, node string) {
		for _, p := range []string{`{"spec":{"unschedulable":true}}`, `{"spec":{"unschedulable":null}}`} {
			if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
		for j := 0; j < perMachine; j++ {
			if _, err := js.Publish(ctx, fmt.Sprintf("baseline.%d", i), []byte(`{"machine":"x","step":"cordon","attempt":1}`)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// eachMachine runs work for each of the n machines of pool (numbered from
// 1, with its Node's name) with a rollout's parallelism at maxUnavailable
// 10%, and returns how long all of it took: the floors' shape.
func eachMachine(pool string, n int, work func(i int, node string)) time.Duration {
	sem := make(chan struct{}, max(n/10, 1))
	var wg sync.WaitGroup
	start := time.Now()
	for i := 1; i <= n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			work(i, fmt.Sprintf("%s-m%02d", pool, i))
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// kubeFloor is the Kubernetes side of a rollout alone: per machine, with
// the rollout's parallelism and a client of its limits, the requests a
// machine's rollout makes (the cordon, the drain's list of the node's pods,
// the uncordon with the revision's labels and anvil's note of them, values
// as the Node has them now) and the two its kubelet makes across the
// reboot (Ready to False with the simulator's RebootingReason, which kwok
// leaves alone, and back to True), one after the other as in a rollout,
// while the cluster's controllers react to them (the node lifecycle
// controller's taints; with a NotReady of one round trip rather than a
// reboot's, they may do less than in a rollout). No rollout runs
// meanwhile; anvil's services only answer the idle fleet's heartbeats and
// polls, and the rollout service's watch sees the Nodes change. What it
// takes is about what the workload cluster's control plane needs for the
// rollout on these cores: the stderr line gives its processes' CPU apart.
// A machine whose requests fail is put back (uncordoned, Ready) as well as
// can be, and the benchmark fails.
func (s *stack) kubeFloor(b *testing.B, kube kubernetes.Interface, pool string, n int) time.Duration {
	ctx, cancel := context.WithTimeout(s.ctx, baselineTimeout)
	defer cancel()
	condition := func(status corev1.ConditionStatus, reason string) ([]byte, error) {
		now := metav1.Now()
		return json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
			"type": corev1.NodeReady, "status": status, "reason": reason, "message": "the Kubernetes floor",
			"lastHeartbeatTime": now, "lastTransitionTime": now}}}})
	}
	// The rollout's cordon patch, which also sets its note of who cordoned
	// the node; its uncordon patch drops the note and sets the revision's
	// labels and anvil's record of them (adapters.Uncordon).
	cordon := fmt.Sprintf(`{"metadata":{"annotations":{%q:"the-kubernetes-floor"}},"spec":{"unschedulable":true}}`, app.CordonedByAnnotation)
	uncordon := func(n *corev1.Node) ([]byte, error) {
		annotations := map[string]any{app.CordonedByAnnotation: nil}
		labels := map[string]any{}
		if n != nil {
			if v, ok := n.Annotations[adapters.ManagedNodeConfigAnnotation]; ok {
				annotations[adapters.ManagedNodeConfigAnnotation] = v
			}
			for k, v := range n.Labels {
				if strings.HasPrefix(k, "anvil.dev/") {
					labels[k] = v
				}
			}
		}
		return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations, "labels": labels},
			"spec": map[string]any{"unschedulable": nil}})
	}
	patchNode := func(name string, patch []byte) (*corev1.Node, error) {
		return kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "anvil-rollout"})
	}
	setReady := func(name string, status corev1.ConditionStatus, reason string) error {
		patch, err := condition(status, reason)
		if err == nil {
			_, err = kube.CoreV1().Nodes().PatchStatus(ctx, name, patch)
		}
		return err
	}
	oneMachine := func(name string) error {
		cordoned, err := patchNode(name, []byte(cordon))
		if err != nil {
			return err
		}
		if _, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name}); err != nil {
			return err
		}
		if err := setReady(name, corev1.ConditionFalse, sim.RebootingReason); err != nil {
			return err
		}
		if err := setReady(name, corev1.ConditionTrue, "KubeletReady"); err != nil {
			return err
		}
		patch, err := uncordon(cordoned)
		if err == nil {
			_, err = patchNode(name, patch)
		}
		return err
	}
	return eachMachine(pool, n, func(_ int, name string) {
		if err := oneMachine(name); err != nil {
			b.Errorf("the Kubernetes floor, node %s: %v", name, err)
			// Put it back as well as can be: Ready, uncordoned.
			_ = setReady(name, corev1.ConditionTrue, "KubeletReady")
			if patch, err := uncordon(nil); err == nil {
				_, _ = patchNode(name, patch)
			}
		}
	})
}

// progress prints the rollout's progress to stderr every 5 s until stop
// is called: a benchmark's own log shows only at its end.
func (s *stack) progress(org, pool string, revision uint64) (stop func()) {
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if r, ok := s.findRollout(org, pool, revision); ok {
					fmt.Fprintf(os.Stderr, "%6.1fs %s %s: %s (in progress %d, failed %d)%s\n", time.Since(start).Seconds(), r.ID, r.Status, r.Progress,
						r.Progress.InProgress, r.Progress.Failed, s.instructionBacklog())
				}
			}
		}
	}()
	return func() { close(done) }
}

// instructionConsumer is the boot service's consumer of the rollouts'
// reboot instructions (its ports.InstructionsHandler for rollouts).
const instructionConsumer = "handler-boot-instructions-rollout"

// instructionBacklog says how far the boot service's consumer of the
// rollouts' events is behind: events not delivered yet, and delivered
// but not acknowledged (a reboot step waits for its instruction there).
func (s *stack) instructionBacklog() string {
	c, err := s.env.JS.Consumer(s.ctx, events.StreamName, instructionConsumer)
	if err != nil {
		return ""
	}
	info, err := c.Info(s.ctx)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("; boot's consumer of rollout events: %d not delivered, %d unacknowledged", info.NumPending, info.NumAckPending)
}
