package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/demo/story"
	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// The test OS stands in for Flatcar in the boot service's local mirror
// (tools/testos): the pool selects it as Flatcar channel testOSChannel,
// version testOSVersion, and the boot service serves it from
// <assets>/flatcar/<channel>/<version>/.
const (
	testOSChannel = "alpha"
	testOSVersion = "0.1.0"
	// rmKubernetes is the pool's Kubernetes version: the harness's, whose
	// sysext tools/kubebins builds.
	rmKubernetes = "1.37.1"
)

// realMachine is the control plane a QEMU machine boots against: a real
// kube-apiserver, the dev stack with the boot service's public URL set to
// what the VM reaches (QEMU's user network maps the host's loopback to
// 10.0.2.2), an assets directory holding the agent, the Kubernetes sysext
// and the test OS, all through the product's own settings.
type realMachine struct {
	t       *testing.T
	ctx     context.Context
	kube    *kubeharness.ControlPlane
	stack   *devstack.Stack
	logs    *eventstest.SyncBuffer
	assets  string
	nodeDir string         // tools/kubebins/node's artifacts: kubelet, kubeadm, the sysext, images
	public  string         // the boot service's URL as the VM reaches it
	gateway string         // the gateway's URL
	admin   *client.Client // the bootstrap admin's, in the organization
	api     *client.Client // the organization's admin token's
	org     string
	enroll  string
	qemu    string
	started time.Time
}

// requireTool skips the test when a program it needs is missing.
func requireTool(t *testing.T, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (%s)", name, hint)
	}
	return p
}

// repoRoot is the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// runScript runs one of the repository's build scripts and returns what it
// printed on stdout (its progress goes to the test log).
func runScript(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", args...)
	cmd.Dir = repoRoot(t)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// freePort picks a loopback port the kernel says is free (the boot
// service's public URL must name it before the service starts).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// newRealMachine builds (or reuses) the test OS, the agent and the sysext,
// and starts the control plane.
func newRealMachine(t *testing.T, variant string, kubeOpts ...kubeharness.Option) *realMachine {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a virtual machine; skipped with -short")
	}
	rm := &realMachine{t: t, org: "metal", started: time.Now()}
	rm.qemu = requireTool(t, "qemu-system-x86_64", "make qemu installs qemu-system-x86, ipxe-qemu and ipxe")
	if _, err := os.Stat("/usr/lib/ipxe/qemu"); err != nil {
		t.Skip("Debian's iPXE ROMs for QEMU are not installed (make qemu)")
	}
	// The kubernetes variant boots systemd, joins and drains real pods.
	budget := 25 * time.Minute
	if variant == "kubernetes" {
		budget = 40 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	t.Cleanup(cancel)
	rm.ctx = ctx

	// What the machine fetches, built by the project and put where the
	// boot service serves it: nothing placed by hand.
	rm.assets = t.TempDir()
	rm.nodeDir = runScript(t, "tools/kubebins/node/build.sh", "--print-dir")
	osArgs := []string{"tools/testos/build.sh", "--print-dir"}
	if variant != "" {
		osArgs = []string{"tools/testos/build.sh", "--variant", variant, "--print-dir"}
	}
	osDir := runScript(t, osArgs...)
	for _, f := range []string{"flatcar_production_pxe.vmlinuz", "flatcar_production_pxe_image.cpio.gz"} {
		copyFile(t, filepath.Join(osDir, f), filepath.Join(rm.assets, "flatcar", testOSChannel, testOSVersion, f))
	}
	sysext := "kubernetes-v" + rmKubernetes + "-x86-64.raw"
	copyFile(t, filepath.Join(rm.nodeDir, "sysext", sysext), filepath.Join(rm.assets, "sysext", sysext))
	agent := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(rm.assets, "assets", "anvil-agent-linux-amd64"), "./agent/cmd/anvil-agent")
	agent.Dir = repoRoot(t)
	agent.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := agent.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, b)
	}
	t.Logf("test OS %s, sysext and agent ready in %s", osDir, time.Since(rm.started).Round(time.Second))

	kdir := filepath.Join(t.TempDir(), "kube")
	if err := os.MkdirAll(kdir, 0o750); err != nil {
		t.Fatal(err)
	}
	kube, err := kubeharness.StartProcess(ctx, kdir, append([]kubeharness.Option{kubeharness.WithLogger(slog.New(slog.DiscardHandler))}, kubeOpts...)...)
	if err != nil {
		t.Fatalf("starting the Kubernetes control plane: %v (make kube-bins)", err)
	}
	t.Cleanup(func() { _ = kube.Stop() })
	rm.kube = kube

	bootPort := freePort(t)
	rm.public = "http://10.0.2.2:" + bootPort
	gatewayAddr := "127.0.0.1:" + freePort(t)
	rm.logs = &eventstest.SyncBuffer{}
	token := "anvil_admin_realmachine_" + fmt.Sprint(time.Now().UnixNano())
	cfg := devstack.Config{
		DataDir: filepath.Join(t.TempDir(), "data"), GatewayAddr: gatewayAddr, BootAddr: "127.0.0.1:" + bootPort,
		AdminToken: token, Logger: slog.New(slog.NewJSONHandler(rm.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		PublicURL: rm.public, AssetsDir: rm.assets, AssetBaseURL: "/flatcar",
		KubernetesVersions: rmKubernetes,
		// The firmware asks again quickly while it waits to be provisioned.
		BootRetryInitial: 2 * time.Second, BootRetryMax: 10 * time.Second,
		RolloutLeaseTTL: 5 * time.Second, RolloutPoll: time.Second, RolloutReplan: 5 * time.Second,
	}
	st, err := devstack.Start(context.WithoutCancel(ctx), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("ANVIL_TEST_LOGS") != "" {
			t.Logf("services' logs (last 30000 bytes):\n%s", rm.logs.Tail(30000))
		}
		if err := st.Stop(); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
	})
	if err := st.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	rm.stack = st
	rm.gateway = "http://" + gatewayAddr
	rm.admin, err = client.New(client.Options{BaseURL: rm.gateway, Token: token, Org: rm.org})
	if err != nil {
		t.Fatal(err)
	}
	for {
		err := rm.admin.Readyz(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the gateway never became ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return rm
}

func (rm *realMachine) must(err error) {
	rm.t.Helper()
	if err != nil {
		rm.t.Fatal(err)
	}
}

// setUp creates the organization, its tokens and the cluster.
func (rm *realMachine) setUp(cluster client.ClusterCreate) {
	rm.t.Helper()
	ctx := rm.ctx
	rm.must(story.Retry(ctx, func() error {
		_, err := rm.admin.CreateOrg(ctx, client.OrgCreate{ID: rm.org, DisplayName: "Metal"})
		return err
	}))
	var tok, en *client.TokenIssued
	rm.must(story.Retry(ctx, func() (err error) {
		tok, err = rm.admin.CreateToken(ctx, client.TokenCreate{Name: "ops", Role: client.RoleAdmin})
		return err
	}, 503, 404))
	api, err := client.New(client.Options{BaseURL: rm.gateway, Token: tok.Token, Org: rm.org})
	rm.must(err)
	rm.api = api
	rm.must(story.Retry(ctx, func() (err error) {
		en, err = rm.admin.CreateEnrollmentToken(ctx, client.EnrollmentTokenCreate{Name: "rack-1"})
		return err
	}, 503, 404))
	rm.enroll = en.Token
	rm.must(story.Retry(ctx, func() error { _, err := rm.api.GetOrg(ctx); return err }, 503, 401, 404))
	rm.must(story.Retry(ctx, func() error { _, err := rm.api.CreateCluster(ctx, cluster); return err }))
}

// poolSpec is the pool: the test OS as its Flatcar, a node label that
// changes with gen (a change that needs a reboot), and taints.
func poolSpec(gen string, taints []client.Taint) client.PoolSpec {
	return client.PoolSpec{
		DisplayName: "Metal workers",
		PoolConfig: client.PoolConfig{
			Kubernetes: client.Kubernetes{Minor: rmKubernetes[:strings.LastIndex(rmKubernetes, ".")]},
			Flatcar:    client.Flatcar{Channel: testOSChannel, Version: testOSVersion},
			NodeLabels: map[string]string{"anvil.dev/gen": gen, "anvil.dev/metal": "true"},
			Taints:     taints,
		},
		Rollout: client.PoolRollout{MaxUnavailable: "1", DrainTimeout: "3m", NodeReadyTimeout: "10m"},
	}
}

// createPool saves and applies the pool metal at gen.
func (rm *realMachine) createPool(gen string, taints []client.Taint) {
	rm.t.Helper()
	p := client.PoolCreate{Name: "metal", Cluster: "metal", PoolSpec: poolSpec(gen, taints), Apply: true}
	rm.must(story.Retry(rm.ctx, func() error { _, err := rm.api.CreatePool(rm.ctx, p); return err }))
}

// updatePool saves and applies the pool metal at gen.
func (rm *realMachine) updatePool(gen string, taints []client.Taint) {
	rm.t.Helper()
	p := client.PoolUpdate{PoolSpec: poolSpec(gen, taints), Apply: true}
	rm.must(story.Retry(rm.ctx, func() error { _, err := rm.api.UpdatePool(rm.ctx, "metal", p); return err }))
}

// preregister registers the machine into the pool metal.
func (rm *realMachine) preregister(uuid, host string) {
	rm.t.Helper()
	m := client.MachinePreregister{UUID: uuid, Hostname: host, Pool: "metal"}
	rm.must(story.Retry(rm.ctx, func() error { _, err := rm.api.PreregisterMachine(rm.ctx, m); return err }))
}

// machine reads one machine through the API.
func (rm *realMachine) machine(uuid string) (client.Machine, error) {
	m, err := rm.api.GetMachine(rm.ctx, uuid)
	if err != nil {
		return client.Machine{}, err
	}
	return *m, nil
}

// rolloutHolding returns the newest rollout that holds the machine.
func (rm *realMachine) rolloutHolding(uuid string, revision uint64) (client.Rollout, bool) {
	list, err := rm.api.ListRollouts(rm.ctx, client.RolloutFilter{ListOptions: client.ListOptions{Limit: 100}})
	if err != nil {
		return client.Rollout{}, false
	}
	for _, r := range list.Items {
		if r.Revision != revision {
			continue
		}
		full, err := rm.api.GetRollout(rm.ctx, r.ID)
		if err != nil {
			continue
		}
		for _, m := range full.Machines {
			if m.UUID == uuid {
				return *full, true
			}
		}
	}
	return client.Rollout{}, false
}

// eventually polls cond until it holds, failing after d with the last
// state it reported and the VM's console.
func (rm *realMachine) eventually(vm *qemuVM, what string, d time.Duration, cond func() (bool, string)) {
	rm.t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			rm.t.Logf("%s (%s after the start)", what, time.Since(rm.started).Round(time.Second))
			return
		}
		last = state
		select {
		case err := <-vm.exited:
			rm.t.Fatalf("QEMU exited before %s: %v; last state: %s\nconsole:\n%s", what, err, last, vm.tail(12000))
		default:
		}
		if time.Now().After(deadline) {
			rm.t.Fatalf("%s: not within %s; last state: %s\nconsole:\n%s", what, d, last, vm.tail(12000))
		}
		time.Sleep(time.Second)
	}
}

// accessLog returns the boot service's access log entries (path without
// its query, status).
type accessEntry struct {
	Path   string `json:"path"`
	Status int    `json:"status"`
	Bytes  int64  `json:"bytes"`
}

func (rm *realMachine) accessLog() []accessEntry {
	var out []accessEntry
	sc := bufio.NewScanner(strings.NewReader(rm.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e struct {
			Msg     string `json:"msg"`
			Service string `json:"service"`
			accessEntry
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "request served" && e.Service == "boot" {
			out = append(out, e.accessEntry)
		}
	}
	return out
}

// qemuVM is one virtual machine whose firmware is Debian's iPXE.
type qemuVM struct {
	serial string
	exited chan error
}

func (v *qemuVM) console() string { b, _ := os.ReadFile(v.serial); return string(b) }

func (v *qemuVM) tail(n int) string {
	c := v.console()
	if len(c) > n {
		return "…" + c[len(c)-n:]
	}
	return c
}

// powerOn starts a VM that network-boots with real iPXE (the NIC's option
// ROM), DHCP pointing it at the chain URL, under software emulation.
func (rm *realMachine) powerOn(uuid string, memMB int) *qemuVM {
	rm.t.Helper()
	dir := rm.t.TempDir()
	vm := &qemuVM{serial: filepath.Join(dir, "serial.log"), exited: make(chan error, 1)}
	cmd := exec.CommandContext(rm.ctx, rm.qemu,
		"-machine", "accel=tcg", "-m", fmt.Sprint(memMB), "-smp", "2", "-nographic", "-display", "none", "-monitor", "none",
		"-uuid", uuid,
		"-netdev", "user,id=n0,bootfile="+rm.public+"/boot.ipxe?token="+rm.enroll,
		"-device", "virtio-net-pci,netdev=n0", "-boot", "n",
		"-serial", "file:"+vm.serial,
	)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out := &eventstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		rm.t.Fatal(err)
	}
	go func() { vm.exited <- cmd.Wait() }()
	rm.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		if rm.t.Failed() || os.Getenv("ANVIL_TEST_CONSOLE") != "" {
			rm.t.Logf("serial console of %s (last 20000 bytes):\n%s\nqemu: %s", uuid, vm.tail(20000), out.String())
		}
	})
	return vm
}

// TestRealMachine boots a QEMU machine with real iPXE firmware against the
// dev stack as shipped: the chain script, the boot script, a real Linux
// kernel, the real Ignition fetching and applying the rendered config
// (agent and sysext downloaded from the boot service and checked against
// their hashes), and the real agent, which heartbeats, reports and reboots
// the machine into a new revision. The Node's readiness comes from a
// kwok-managed Node created when the machine first reports (this test OS
// runs no kubelet; TestRealKubelet does).
func TestRealMachine(t *testing.T) {
	rm := newRealMachine(t, "")
	rm.setUp(client.ClusterCreate{
		Name: "metal", APIEndpoint: rm.kube.RESTConfig().Host, KubernetesVersion: rmKubernetes,
		Kubeconfig: string(rm.kube.Kubeconfig), BootstrapToken: "abcdef.0123456789abcdef",
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
	})
	ctx := rm.ctx
	// Save & Apply revision 1 before any machine exists: a machine that
	// boots later provisions itself with it.
	rm.createPool("1", nil)

	const uuid = "4c4c4544-0035-4b10-8056-b7c04f4e3b01"
	const host = "metal-01"
	rm.preregister(uuid, host)

	vm := rm.powerOn(uuid, 1536)
	// A kubelet would register the Node once the machine runs; this test OS
	// has none, so the test does it (kwok keeps it Ready).
	go func() {
		for ctx.Err() == nil {
			if m, err := rm.machine(uuid); err == nil && m.CurrentRevision > 0 {
				_, _ = rm.kube.CreateNode(ctx, kubeharness.Node{Name: host})
				return
			}
			time.Sleep(time.Second)
		}
	}()

	rm.eventually(vm, "the machine provisions itself: ready at revision 1, with its agent's reports", 12*time.Minute, func() (bool, string) {
		m, err := rm.machine(uuid)
		if err != nil {
			return false, err.Error()
		}
		ok := m.Status == "ready" && m.CurrentRevision == 1 && !m.LastIPXEBootAt.IsZero() && !m.LastIgnitionAt.IsZero() &&
			!m.LastSeen.IsZero() && m.Hardware != nil && m.Hardware.CPUs > 0
		return ok, fmt.Sprintf("%s, current %d, target %d, ipxe %v, ignition %v, seen %v, hardware %v",
			m.Status, m.CurrentRevision, m.TargetRevision, m.LastIPXEBootAt, m.LastIgnitionAt, m.LastSeen, m.Hardware != nil)
	})
	prov, ok := rm.rolloutHolding(uuid, 1)
	if !ok || prov.Status != "succeeded" || !strings.Contains(prov.RequestedBy, "provisioning") {
		t.Fatalf("the machine was not provisioned by its own rollout: %+v %q", prov.Progress, prov.RequestedBy)
	}
	var log *client.StartupLog
	rm.must(story.Retry(ctx, func() (err error) { log, err = rm.api.GetMachineStartupLog(ctx, uuid); return err }, 503, 404))
	if len(log.Lines) == 0 || !strings.Contains(strings.Join(log.Lines, "\n"), "anvil-agent") {
		t.Fatalf("startup log: %d lines: %v", len(log.Lines), log.Lines)
	}
	firstBoot := time.Since(rm.started)

	// Revision 2: a node label changes. The rollout cordons and drains the
	// node, the agent takes the reboot instruction and reboots the VM, iPXE
	// chains into revision 2, and the agent reports it.
	rm.updatePool("2", nil)
	reboot := time.Now()
	rm.eventually(vm, "the machine reboots into revision 2 and the rollout succeeds", 12*time.Minute, func() (bool, string) {
		r, ok := rm.rolloutHolding(uuid, 2)
		if !ok {
			return false, "no rollout of revision 2 yet"
		}
		m, _ := rm.machine(uuid)
		return r.Status == "succeeded" && m.CurrentRevision == 2 && m.Status == "ready",
			fmt.Sprintf("rollout %s %s %s; machine %s at %d", r.ID, r.Status, r.Reason, m.Status, m.CurrentRevision)
	})
	c := vm.console()
	if n := strings.Count(c, "ignition files: ok"); n < 2 {
		t.Fatalf("the console shows %d Ignition runs, want two boots", n)
	}

	// Every file the rendered Ignition names was served by the boot
	// service: nothing answered 404.
	served := map[string]int{}
	for _, e := range rm.accessLog() {
		if e.Status >= 400 && !strings.HasPrefix(e.Path, "/agent/") {
			t.Errorf("the boot service answered %d for %s", e.Status, e.Path)
		}
		if e.Status == 200 {
			served[e.Path]++
		}
	}
	for _, p := range []string{
		"/boot.ipxe", "/ipxe", "/ignition", "/assets/anvil-agent-linux-amd64",
		"/sysext/kubernetes-v" + rmKubernetes + "-x86-64.raw",
		"/flatcar/" + testOSChannel + "/" + testOSVersion + "/flatcar_production_pxe.vmlinuz",
		"/flatcar/" + testOSChannel + "/" + testOSVersion + "/flatcar_production_pxe_image.cpio.gz",
	} {
		if served[p] < 2 {
			t.Errorf("%s was served %d times, want once per boot (2)", p, served[p])
		}
	}
	t.Logf("power-on to ready at revision 1: %s; revision 2 applied to ready: %s; whole test %s",
		firstBoot.Round(time.Second), time.Since(reboot).Round(time.Second), time.Since(rm.started).Round(time.Second))
	if i := strings.LastIndex(c, "anvil-testos: startup finished"); i >= 0 {
		t.Logf("console of the second boot's end:\n%s", c[max(0, i-3000):min(len(c), i+200)])
	}
}
