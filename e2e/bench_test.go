package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/anvil-fleet/anvil/demo/story"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/natsserver"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	"github.com/anvil-fleet/anvil/sim"
)

// proc is one service binary running as its own process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// vmHWM is the process's peak resident set size in bytes.
func (p *proc) vmHWM() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return -1
}

// BenchmarkFleet1000 takes a simulated fleet (1000 machines; ANVIL_BENCH_SCALE
// sets the size, docs/performance.md, and ANVIL_E2E_BENCH_N, if set, the
// exact number) through the whole path against the real stack, each
// service its own process on one nats-server, and a real kube-apiserver:
// boot and self-register, assign (hostname and pool over the HTTP API),
// provision (the first apply), wait until every machine has a Ready Node,
// roll out a new revision, done. It reports each phase's time, every
// service's peak RSS (VmHWM) and how many machines took each path in each
// rollout (cordoned and drained, provisioned without a node); it fails if a
// machine with a Node skipped cordon and drain.
//
//	go test -run '^$' -bench BenchmarkFleet1000 -benchtime 1x -timeout 60m ./e2e/
func BenchmarkFleet1000(b *testing.B) {
	n := eventstest.BenchSize(b, "machines", 1000, 5)
	if v, err := strconv.Atoi(os.Getenv("ANVIL_E2E_BENCH_N")); err == nil && v > 0 {
		n = v
		b.Logf("size: %d machines (ANVIL_E2E_BENCH_N)", n)
	}
	for b.Loop() {
		fleet1000(b, n)
	}
}

func fleet1000(b *testing.B, n int) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "bin")
	begin := time.Now()
	build := exec.Command("go", "build", "-o", bin+"/",
		"github.com/anvil-fleet/anvil/services/registry/cmd/anvil-registry",
		"github.com/anvil-fleet/anvil/services/revisions/cmd/anvil-revisions",
		"github.com/anvil-fleet/anvil/services/rollout/cmd/anvil-rollout",
		"github.com/anvil-fleet/anvil/services/boot/cmd/anvil-boot",
		"github.com/anvil-fleet/anvil/services/gateway/cmd/anvil-gateway")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the services: %v\n%s", err, out)
	}
	b.Logf("built the five service binaries in %s", time.Since(begin).Round(time.Millisecond))

	cp := kubeharness.Start(b)
	ns, err := natsserver.Start(natsserver.Options{DataDir: filepath.Join(dir, "jetstream"), Host: "127.0.0.1", Name: "anvil-bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ns.Shutdown)
	gw, err := story.FreeAddr()
	must(b, err)
	boot, err := story.FreeAddr()
	must(b, err)
	// The fleet is simulated: the boot service serves the simulator's
	// stand-in agent and sysexts.
	assets, err := simassets.Dir(dir, story.KubernetesVersions)
	must(b, err)
	admin := "anvil_admin_bench_0123456789"
	sum := sha256.Sum256([]byte(admin))
	common := []string{"ANVIL_NATS_URL=" + ns.ClientURL(), "ANVIL_LOG_LEVEL=warn", "HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	services := []struct {
		name string
		env  []string
	}{
		{"registry", []string{"ANVIL_REGISTRY_ADMIN_ADDR=", "ANVIL_REGISTRY_OFFLINE_AFTER=30m"}},
		{"revisions", []string{"ANVIL_REVISIONS_ADMIN_ADDR=", "ANVIL_KUBERNETES_VERSIONS=" + story.KubernetesVersions,
			"ANVIL_BOOT_PUBLIC_URL=http://" + boot,
			"ANVIL_REVISIONS_ENCRYPTION_KEYS=k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))}},
		{"rollout", []string{"ANVIL_ROLLOUT_ADMIN_ADDR=", "ANVIL_ROLLOUT_POLL=500ms", "ANVIL_ROLLOUT_REPLAN=5s", "ANVIL_ROLLOUT_LEASE_TTL=10s"}},
		{"boot", []string{"ANVIL_BOOT_ADMIN_ADDR=", "ANVIL_BOOT_ADDR=" + boot, "ANVIL_BOOT_IPXE_RETRY_INITIAL=200ms", "ANVIL_BOOT_IPXE_RETRY_MAX=2s",
			"ANVIL_BOOT_ASSETS_DIR=" + assets}},
		{"gateway", []string{"ANVIL_GATEWAY_ADMIN_ADDR=", "ANVIL_GATEWAY_ADDR=" + gw, "ANVIL_ADMIN_TOKEN_HASH=" + hex.EncodeToString(sum[:])}},
	}
	var procs []*proc
	for _, s := range services {
		p := &proc{name: s.name, log: &bytes.Buffer{}}
		p.cmd = exec.Command(filepath.Join(bin, "anvil-"+s.name))
		p.cmd.Env = append(append([]string{}, common...), s.env...)
		p.cmd.Stderr, p.cmd.Stdout = &syncWriter{w: p.log}, &syncWriter{w: p.log}
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, p)
	}
	b.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-done
			}
			if b.Failed() {
				b.Logf("%s's log (tail):\n%s", p.name, tailString(p.log.String(), 3000))
			}
		}
	})

	rc := cp.RESTConfig()
	rc.QPS, rc.Burst = 2000, 4000
	kube, err := kubernetes.NewForConfig(rc)
	must(b, err)
	env := &story.Env{Kube: cp, GatewayURL: "http://" + gw, BootURL: "http://" + boot, AdminToken: admin}
	s := story.New(env, story.Options{Org: "bench", Pool: "fleet", Booted: n, MaxUnavailable: "10%", NodeReadyTimeout: "10m",
		StateDir: filepath.Join(dir, "machines"), SimLogger: slog.New(slog.DiscardHandler),
		Sim: func(c *sim.Config) {
			c.Kube = kube
			c.RebootTime, c.RebootJitter, c.MaxWait = time.Second, 500*time.Millisecond, time.Second
			c.AgentIntervals = sim.AgentIntervals{Heartbeat: 10 * time.Second, PollWait: 20 * time.Second}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	var phases []string
	lap := time.Now()
	phase := func(what string) {
		d := time.Since(lap)
		phases = append(phases, fmt.Sprintf("%s %s", what, d.Round(10*time.Millisecond)))
		// live on stderr: the benchmark's log shows at its end, and only
		// its first ten lines
		fmt.Fprintf(os.Stderr, "%-46s %9s\n", what, d.Round(10*time.Millisecond))
		lap = time.Now()
	}
	// the processes listen a moment after they start; the gateway answers
	// 503 until the registry does
	must(b, story.Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		res, err := http.Get(env.GatewayURL + "/readyz")
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == 200, nil
	}))
	must(b, s.CreateOrg(ctx))
	must(b, s.CreateCluster(ctx))
	_, err = s.CreatePool(ctx)
	must(b, err)
	phase("stack up; org, cluster, pool created")
	must(b, s.StartFleet(ctx))
	b.Cleanup(s.Fleet.Stop)
	s.Boot(ctx)
	must(b, s.WaitRegistered(ctx, nil))
	phase(fmt.Sprintf("%d machines booted and self-registered", n))
	must(b, s.Assign(ctx))
	phase("named and assigned over the HTTP API")
	ro, err := s.ApplyRevision(ctx, 1)
	must(b, err)
	r, err := s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(b, err)
	if r.Status != "succeeded" || r.Progress.Done != n {
		b.Fatalf("provisioning: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	// paths counts a finished rollout's machines by the path they took, from
	// its operation log: cordon and drain succeeded, or neither ran (no
	// node: provisioned straight to the reboot).
	paths := func(id string) machinePaths {
		log, err := s.Log(ctx, id)
		must(b, err)
		steps := map[string]map[string]bool{}
		var p machinePaths
		for _, e := range log {
			if e.Machine == "" {
				continue
			}
			if steps[e.Machine] == nil {
				steps[e.Machine] = map[string]bool{}
			}
			if e.Outcome == "succeeded" {
				steps[e.Machine][e.Step] = true
			}
			if e.Outcome == "done" {
				p.done++
			}
		}
		for _, st := range steps {
			switch {
			case st["cordon"] && st["drain"]:
				p.cordonedDrained++
			case !st["cordon"] && !st["drain"]:
				p.noNode++
			default:
				p.other++
			}
		}
		return p
	}
	provisioned := paths(r.ID)
	phase("provisioned (apply revision 1: Ignition, join)")
	// Every machine joined (a Ready Node) and the registry holds it ready,
	// so that the rollout cordons and drains each one.
	must(b, story.Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		ready, _, total, err := s.NodesReady(ctx)
		if err != nil || ready != n || total != n {
			return false, nil
		}
		ms, err := s.Machines(ctx, s.Opts.Pool)
		if err != nil {
			return false, nil
		}
		c := story.Counts(ms)
		return c["ready"] == n, nil
	}))
	phase(fmt.Sprintf("%d Nodes Ready, %d machines ready", n, n))
	_, ro, err = s.ChangeVersion(ctx, "1.37")
	must(b, err)
	r, err = s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(b, err)
	if r.Status != "succeeded" || r.Progress.Done != n {
		b.Fatalf("rollout: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	rolled := paths(r.ID)
	if rolled.cordonedDrained != n || rolled.done != n {
		b.Fatalf("rollout %s: every machine had a Ready Node, yet only %d of %d were cordoned and drained (%d went through without a node, %d only in part; %d done)",
			r.ID, rolled.cordonedDrained, n, rolled.noNode, rolled.other, rolled.done)
	}
	phase("rolled out revision 2 (maxUnavailable 10%)")
	total := time.Since(begin)
	var rss []string
	for _, p := range procs {
		hwm := p.vmHWM()
		rss = append(rss, fmt.Sprintf("%s %d MiB", p.name, hwm>>20))
		b.ReportMetric(float64(hwm)/(1<<20), p.name+"-peak-MiB")
	}
	b.ReportMetric(float64(rolled.cordonedDrained), "cordoned_drained")
	b.ReportMetric(float64(rolled.noNode), "no_node")
	// one line each: go test shows only the first ten lines of a benchmark's log
	b.Logf("%d machines: %s; total %s (with the build)", n, strings.Join(phases, "; "), total.Round(time.Second))
	b.Logf("paths: provisioning %d provisioned without a node, %d cordoned and drained; rollout %d cordoned and drained, %d without a node; %d reboots; peak RSS (VmHWM): %s",
		provisioned.noNode, provisioned.cordonedDrained, rolled.cordonedDrained, rolled.noNode, s.Fleet.TotalReboots(), strings.Join(rss, ", "))
}

// machinePaths counts a finished rollout's machines by the path they took.
type machinePaths struct{ done, cordonedDrained, noNode, other int }

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
