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

// BenchmarkFleet1000 takes a simulated fleet (ANVIL_E2E_BENCH_N, default
// 1000 machines) through the whole path against the real stack, each
// service its own process on one nats-server, and a real kube-apiserver:
// boot and self-register, assign (hostname and pool over the HTTP API),
// provision (the first apply), roll out a new revision, done. It reports
// each phase's time and every service's peak RSS (VmHWM).
//
//	go test -run '^$' -bench BenchmarkFleet1000 -benchtime 1x -timeout 60m ./e2e/
func BenchmarkFleet1000(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("ANVIL_E2E_BENCH_N")); err == nil && v > 0 {
		n = v
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
		{"boot", []string{"ANVIL_BOOT_ADDR=" + boot, "ANVIL_BOOT_IPXE_RETRY_INITIAL=200ms", "ANVIL_BOOT_IPXE_RETRY_MAX=2s",
			"ANVIL_BOOT_ASSETS_DIR=" + assets}},
		{"gateway", []string{"ANVIL_GATEWAY_ADDR=" + gw, "ANVIL_ADMIN_TOKEN_HASH=" + hex.EncodeToString(sum[:])}},
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
		phases = append(phases, fmt.Sprintf("%-46s %9s", what, d.Round(10*time.Millisecond)))
		b.Logf("%-46s %9s", what, d.Round(10*time.Millisecond))
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
	r, err := s.WaitRollout(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(b, err)
	if r.Status != "succeeded" || r.Progress.Done != n {
		b.Fatalf("provisioning: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	phase("provisioned (apply revision 1: Ignition, join)")
	_, ro, err = s.ChangeVersion(ctx, "1.37")
	must(b, err)
	r, err = s.WaitRollout(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(b, err)
	if r.Status != "succeeded" || r.Progress.Done != n {
		b.Fatalf("rollout: %s %+v %s", r.Status, r.Progress, r.Reason)
	}
	phase("rolled out revision 2 (maxUnavailable 10%)")
	total := time.Since(begin)
	var rss []string
	for _, p := range procs {
		hwm := p.vmHWM()
		rss = append(rss, fmt.Sprintf("%s %d MiB", p.name, hwm>>20))
		b.ReportMetric(float64(hwm)/(1<<20), p.name+"-peak-MiB")
	}
	b.Logf("%d machines:\n  %s\npeak RSS (VmHWM): %s\ntotal %s (with the build), reboots %d",
		n, strings.Join(phases, "\n  "), strings.Join(rss, ", "), total.Round(time.Second), s.Fleet.TotalReboots())
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
