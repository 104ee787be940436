package selftest

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/tools/testos/selftest/vmtest"
)

// TestKubernetesVariantRunsTheRenderedConfigUnderSystemd boots the
// kubernetes variant with a config shaped like anvil's rendered one (the
// sysext served with its sha512, the real agent) and checks, from inside
// (the probe) and outside (the agent API), that systemd's first boot did
// what Flatcar's would: presets from Ignition, the sysext merged and
// kubelet visible, containerd on the rendered config with the images, the
// agent heartbeating, kubeadm join run (and failing at discovery: there is
// no control plane here), masks kept, /usr read-only. Then the agent
// reboots the VM with the real systemctl, and it comes back.
func TestKubernetesVariantRunsTheRenderedConfigUnderSystemd(t *testing.T) {
	qemu := vmtest.FindQEMU(t)
	repo := vmtest.RepoRoot(t)
	imageDir := vmtest.BuildImage(t, repo, "kubernetes", "ANVIL_TESTOS_KUBERNETES_DIR")
	node := vmtest.LoadNodeArtifacts(t, imageDir)
	agentBin := vmtest.BuildAgent(t, repo)

	uuid := vmtest.RandomUUID(t)
	credential := vmtest.RandomToken(t, 32)
	t.Logf("machine UUID %s (random; QEMU's -uuid, read by the agent from DMI)", uuid)
	apiPort := vmtest.ClosedPort(t)
	t.Logf("kubeadm join discovers 10.0.2.2:%d, where nothing listens", apiPort)

	agentSum := sha512.Sum512(agentBin)
	srv := &vmtest.BootServer{UUID: uuid, Credential: credential, Agent: agentBin, Files: map[string]string{
		"/assets/sysext/" + node.Sysext.Name: node.SysextPath(),
	}}
	// The config is set before the server starts serving (Start), so that
	// the handler goroutines see it.
	ts := httptest.NewUnstartedServer(srv)
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	vmURL := "http://10.0.2.2:" + port
	revision := func(boot int) string { return fmt.Sprintf("mr-kube-selftest-%d", boot) }
	hostname := "kube-selftest"
	srv.Config = func(boot int) ([]byte, error) {
		return vmtest.KubernetesConfig{
			Hostname: hostname, Revision: revision(boot), BootURL: vmURL, Credential: credential,
			AgentURL: vmURL + "/assets/anvil-agent", AgentHash: "sha512-" + hex.EncodeToString(agentSum[:]),
			SysextName: node.Sysext.Name, SysextURL: vmURL + "/assets/sysext/" + node.Sysext.Name,
			SysextHash: "sha512-" + node.Sysext.SHA512,
			Join: vmtest.KubeJoin{
				APIServerEndpoint: "10.0.2.2:" + strconv.Itoa(apiPort),
				Token:             "abcdef.0123456789abcdef",
				CACertHash:        "sha256:" + strings.Repeat("ab", 32),
				// Nothing answers discovery here; fail after 20 s instead of
				// kubeadm's 5 minutes (the only change from anvil's shape).
				DiscoveryTimeout: "20s",
			},
			Labels: map[string]string{"anvil.dev/pool": "selftest"},
			Taints: []vmtest.Taint{{Key: "anvil.dev/selftest", Value: "true", Effect: "NoSchedule"}},
			SSHKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7MFQfcHd1ylZUcKQiI8JWtuQRNG3PWlubfBl1oO9T8 selftest@example.com",
		}.JSON()
	}
	ts.Start()
	t.Cleanup(ts.Close)

	memory := 2048
	if v := os.Getenv("ANVIL_TESTOS_MEMORY_MB"); v != "" {
		memory, _ = strconv.Atoi(v)
	}
	w, powerOn := vmtest.StartVM(t, vmtest.VMSpec{
		QEMU: qemu, ImageDir: imageDir, UUID: uuid, MemoryMB: memory, Server: srv,
		Append: "flatcar.first_boot=1 ignition.config.url=" + vmURL + "/ignition?uuid=" + uuid + "&token=" + vmtest.RandomToken(t, 24),
	})

	var switched, firstHeartbeat time.Time
	w.Until("the switch to systemd", 10*time.Minute, func() bool {
		return strings.Contains(w.ConsoleText(), "anvil-testos: switching root to /sysroot: systemd")
	})
	switched = time.Now()
	w.Until("the agent's first heartbeat", 10*time.Minute, func() bool {
		_, hbs, _, _, _ := srv.Snapshot()
		return len(hbs) > 0
	})
	_, hbs, _, _, _ := srv.Snapshot()
	firstHeartbeat = hbs[0].At
	w.Until("the probe's report (the boot finished)", 15*time.Minute, func() bool {
		return len(vmtest.ProbeReports(w.ConsoleText())) > 0
	})
	probed := time.Now()
	r := vmtest.ProbeReports(w.ConsoleText())[0]
	t.Logf("the probe's report:\n%s", r)

	out := w.ConsoleText()
	for _, st := range vmtest.IgnitionStages {
		if !strings.Contains(out, "anvil-testos: ignition "+st+": ok") {
			t.Errorf("the console does not say that Ignition's %s stage succeeded", st)
		}
	}
	if strings.Contains(out, "anvil-testos: starting ") || strings.Contains(out, "anvil-testos: skipping ") {
		t.Error("the init's unit emulation ran in root mode rootfs; systemd must start the units")
	}

	// systemd's first boot: presets from Ignition applied, masks kept.
	if got := r.Text("pid1"); !strings.Contains(got, "Populated /etc with preset unit settings") {
		t.Errorf("systemd did not apply presets on its first boot; PID 1 said: %q", got)
	}
	for _, u := range []string{"containerd.service", "anvil-kubeadm-join.service", "anvil-agent.service"} {
		if got := r.IsEnabled(u); got != "enabled" {
			t.Errorf("%s is %q, want enabled (20-ignition.preset on the first boot)", u, got)
		}
	}
	for _, u := range []string{"update-engine.service", "locksmithd.service"} {
		if got := r.IsEnabled(u); got != "masked" {
			t.Errorf("%s is %q, want masked", u, got)
		}
	}
	if got := r.IsEnabled("apt-daily.timer"); got == "enabled" {
		t.Error("apt-daily.timer is enabled: Debian's enablement leaked into the test OS (only presets and /usr enable units)")
	}
	if got := r.Text("system-state"); got != "running" && got != "degraded" {
		t.Errorf("systemctl is-system-running: %q, want running or degraded", got)
	}
	if got := r.Unit("multi-user.target")["ActiveState"]; got != "active" {
		t.Errorf("multi-user.target is %q, want active", got)
	}
	for _, l := range r["failed"] {
		if !strings.HasPrefix(l, "anvil-kubeadm-join.service ") {
			t.Errorf("a unit failed that should not have: %s", l)
		}
	}

	// The sysext: merged into a read-only /usr, kubelet visible to systemd.
	if got := r.Text("kubelet-version"); got != "Kubernetes "+node.KubernetesVersion {
		t.Errorf("/usr/bin/kubelet --version: %q, want Kubernetes %s", got, node.KubernetesVersion)
	}
	if got := r.Text("sysext"); !strings.Contains(got, "kubernetes") {
		t.Errorf("systemd-sysext status does not list the kubernetes extension: %q", got)
	}
	if got := r.Text("usr-write"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("writing under /usr: %q, want Read-only file system", got)
	}
	if got := r.Unit("kubelet.service"); got["LoadState"] != "loaded" {
		t.Errorf("kubelet.service (from the sysext) is not loaded (%v): ensure-sysext's daemon-reload did not happen", got)
	}

	// containerd: the rendered config (through the drop-in), the images.
	if got := r.Unit("containerd.service")["ActiveState"]; got != "active" {
		t.Errorf("containerd.service is %q, want active", got)
	}
	if got := r.Text("containerd-cmdline"); !strings.Contains(got, "--config /etc/containerd/config.toml") {
		t.Errorf("containerd runs as %q, want --config /etc/containerd/config.toml (CONTAINERD_CONFIG from the drop-in)", got)
	}
	for _, img := range []string{node.PauseImage, node.SleeperImage} {
		if !slices.Contains(r["image"], img) {
			t.Errorf("containerd's k8s.io namespace lacks %s; it has %q", img, r["image"])
		}
	}
	if got := r.Text("sysctl"); got != "ip_forward=1 bridge-nf-call-iptables=1" {
		t.Errorf("sysctls: %q (the rendered modules-load.d and sysctl.d)", got)
	}

	// kubeadm join ran, passed preflight, and failed at discovery.
	join := r.Unit("anvil-kubeadm-join.service")
	joinLog := r.Text("join-log")
	if join["ActiveState"] != "failed" || join["Result"] != "exit-code" {
		t.Errorf("anvil-kubeadm-join.service: %v, want failed with exit-code (no control plane)", join)
	}
	if join["ExecMainStatus"] == "203" || strings.Contains(joinLog, "No such file") {
		t.Errorf("kubeadm could not even be started (a missing binary?): %v\n%s", join, joinLog)
	}
	if !strings.Contains(joinLog, "[preflight] Running pre-flight checks") || strings.Contains(joinLog, "[ERROR") {
		t.Errorf("kubeadm's preflight did not pass cleanly:\n%s", joinLog)
	}
	if !strings.Contains(joinLog, "cluster-info") && !strings.Contains(joinLog, "discovery") {
		t.Errorf("kubeadm join did not fail at discovery:\n%s", joinLog)
	}

	// The agent under systemd, the core user, the initramfs's log.
	if got := r.Unit("anvil-agent.service")["ActiveState"]; got != "active" {
		t.Errorf("anvil-agent.service is %q, want active", got)
	}
	if got := r.Text("core"); !strings.HasPrefix(got, "uid=500(core)") {
		t.Errorf("id core: %q, want uid 500", got)
	}
	if got := r.Text("hostname"); got != hostname {
		t.Errorf("hostname %q, want %q", got, hostname)
	}
	if got := r.Text("initrd-log"); got == "0" || got == "" {
		t.Errorf("the journal lacks the initramfs's Ignition lines (anvil-testos-initrd-log.service): %q", got)
	}
	if hbs[0].BootedRevision != revision(1) {
		t.Errorf("first heartbeat: booted_revision %q, want %q", hbs[0].BootedRevision, revision(1))
	}

	// A reboot through the real systemctl: systemd stops everything, QEMU
	// restarts the kernel, Ignition runs again on a fresh tmpfs.
	w.Until("the agent's report", 3*time.Minute, func() bool {
		_, _, reps, _, _ := srv.Snapshot()
		return len(reps) > 0
	})
	srv.Issue(vmtest.Instruction{ID: "i-1", Kind: "reboot", Revision: revision(2), IssuedAt: time.Now().UTC().Format(time.RFC3339)})
	w.Until("the agent's accepted ack", 3*time.Minute, func() bool {
		_, _, _, acks, _ := srv.Snapshot()
		return slices.ContainsFunc(acks, func(a vmtest.Ack) bool { return a.ID == "i-1" && a.Status == "accepted" })
	})
	_, _, _, acks, _ := srv.Snapshot()
	accepted := acks[slices.IndexFunc(acks, func(a vmtest.Ack) bool { return a.ID == "i-1" && a.Status == "accepted" })].At
	w.Until("a heartbeat from the second boot", 12*time.Minute, func() bool {
		_, hbs, _, _, _ := srv.Snapshot()
		return slices.ContainsFunc(hbs, func(h vmtest.Heartbeat) bool { return h.BootedRevision == revision(2) })
	})
	fetches, hbs, _, _, problems := srv.Snapshot()
	second := hbs[slices.IndexFunc(hbs, func(h vmtest.Heartbeat) bool { return h.BootedRevision == revision(2) })].At
	if len(problems) > 0 {
		t.Errorf("the server refused requests: %v", problems)
	}
	if n := w.Reboots(); n != 1 {
		t.Errorf("the guest rebooted %d times, want 1", n)
	}
	if len(fetches) != 2 {
		t.Errorf("%d Ignition fetches, want 2 (one per boot)", len(fetches))
	}
	for where, text := range map[string]string{"the console": vmtest.WithoutKernelCmdline(w.ConsoleText())} {
		if strings.Contains(text, credential) {
			t.Errorf("%s contains the agent credential", where)
		}
	}

	t.Logf("power-on -> switch to systemd: %.1fs", switched.Sub(powerOn).Seconds())
	t.Logf("power-on -> agent's first heartbeat: %.1fs", firstHeartbeat.Sub(powerOn).Seconds())
	t.Logf("power-on -> boot finished (probe; includes kubeadm join's 20 s discovery timeout): %.1fs", probed.Sub(powerOn).Seconds())
	t.Logf("systemd-analyze: %s", r.Text("analyze"))
	t.Logf("reboot accepted -> second boot's first heartbeat: %.1fs", second.Sub(accepted).Seconds())
	if t.Failed() || testing.Verbose() {
		t.Logf("console:\n%s", w.ConsoleText())
	}
}
