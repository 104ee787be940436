// Package selftest proves that the test OS image works on its own: a QEMU
// VM boots it, the real Ignition fetches a config from a server on the
// host, the real anvil-agent (fetched by Ignition, not baked into the
// image) heartbeats and reports, and a reboot instruction reboots the VM
// into a second Ignition fetch.
//
//	cd tools/testos && GOWORK=off go test -count=1 -timeout 30m -v ./selftest
//
// The kubernetes variant's test (kubernetes_test.go) boots the image with a
// Debian root file system under systemd instead.
//
// Environment: ANVIL_TESTOS_DIR (default variant) and
// ANVIL_TESTOS_KUBERNETES_DIR (kubernetes variant) use an already built
// image directory instead of running build.sh; ANVIL_TESTOS_CONSOLE copies
// the VM's serial console there; ANVIL_TESTOS_MEMORY_MB sets the
// kubernetes VM's memory (default 2048).
package selftest

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/tools/testos/selftest/vmtest"
)

func TestImageBootsIgnitionAndTheRealAgentAndReboots(t *testing.T) {
	qemu := vmtest.FindQEMU(t)
	repo := vmtest.RepoRoot(t)
	imageDir := vmtest.BuildImage(t, repo, "default", "ANVIL_TESTOS_DIR")
	agentBin := vmtest.BuildAgent(t, repo)

	uuid := vmtest.RandomUUID(t)
	credential := vmtest.RandomToken(t, 32)
	t.Logf("machine UUID %s (random; QEMU's -uuid, read by the agent from DMI)", uuid)

	sum := sha512.Sum512(agentBin)
	srv := &vmtest.BootServer{UUID: uuid, Credential: credential, Agent: agentBin}
	// The config is set before the server starts serving (Start), so that
	// the handler goroutines see it.
	ts := httptest.NewUnstartedServer(srv) // 127.0.0.1 on a port the kernel picks
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	vmURL := "http://10.0.2.2:" + port // the host's loopback, as QEMU user networking shows it
	revision := func(boot int) string { return fmt.Sprintf("mr-selftest-%d", boot) }
	srv.Config = func(boot int) ([]byte, error) {
		return vmtest.MachineConfig{
			Hostname:   "selftest-node",
			Revision:   revision(boot),
			BootURL:    vmURL,
			Credential: credential,
			AgentURL:   vmURL + "/assets/anvil-agent",
			AgentHash:  "sha512-" + hex.EncodeToString(sum[:]),
			SSHKey:     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7MFQfcHd1ylZUcKQiI8JWtuQRNG3PWlubfBl1oO9T8 selftest@example.com",
		}.JSON()
	}
	ts.Start()
	t.Cleanup(ts.Close)

	bootToken := vmtest.RandomToken(t, 24)
	w, powerOn := vmtest.StartVM(t, vmtest.VMSpec{
		QEMU: qemu, ImageDir: imageDir, UUID: uuid, MemoryMB: 1024, Server: srv,
		Append: "flatcar.first_boot=1 ignition.config.url=" + vmURL + "/ignition?uuid=" + uuid + "&token=" + bootToken,
	})

	// Boot 1: Ignition's stages, then the agent's first heartbeat.
	w.Until("the agent's first heartbeat", 8*time.Minute, func() bool {
		_, hbs, _, _, _ := srv.Snapshot()
		return len(hbs) > 0
	})
	out := w.ConsoleText()
	for _, st := range vmtest.IgnitionStages {
		if !strings.Contains(out, "anvil-testos: ignition "+st+": ok") {
			t.Errorf("the console does not say that Ignition's %s stage succeeded", st)
		}
	}
	for _, want := range []string{
		"anvil-testos: skipping anvil-kubeadm-join.service: /usr/bin/kubeadm is not part of this test OS",
		"anvil-testos: skipping containerd.service: no unit file",
		"anvil-testos: hostname: selftest-node",
		"anvil-testos: starting anvil-agent.service",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the console lacks %q", want)
		}
	}
	fetches, hbs, _, _, _ := srv.Snapshot()
	firstHeartbeat := hbs[0].At
	if len(fetches) != 1 {
		t.Errorf("%d Ignition fetches before the first heartbeat, want 1", len(fetches))
	}
	if hbs[0].BootedRevision != revision(1) {
		t.Errorf("first heartbeat: booted_revision %q, want %q", hbs[0].BootedRevision, revision(1))
	}

	// The report: hardware, and a non-empty startup log from this boot.
	w.Until("the agent's report", 3*time.Minute, func() bool {
		_, _, reps, _, _ := srv.Snapshot()
		return len(reps) > 0
	})
	_, _, reps, _, _ := srv.Snapshot()
	rep := reps[0]
	if rep.BootedRevision != revision(1) {
		t.Errorf("report: booted_revision %q, want %q", rep.BootedRevision, revision(1))
	}
	if rep.Hardware.CPUs < 1 || rep.Hardware.MemoryBytes < 512<<20 {
		t.Errorf("report: %d CPUs and %d bytes of memory; want at least 1 CPU and 512 MiB", rep.Hardware.CPUs, rep.Hardware.MemoryBytes)
	}
	if !slices.ContainsFunc(rep.Hardware.NICs, func(n vmtest.NIC) bool { return strings.HasPrefix(n.MAC, "52:54:00:") }) {
		t.Errorf("report: no NIC with QEMU's MAC prefix 52:54:00: %+v", rep.Hardware.NICs)
	}
	shortISO := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} \S+ \S+: `)
	for _, l := range rep.StartupLog {
		if !shortISO.MatchString(l) {
			t.Errorf("report: startup_log line not in journalctl's short-iso format: %q", l)
			break
		}
	}
	if len(rep.StartupLog) == 0 {
		t.Error("report: empty startup_log (journalctl shim)")
	} else if !slices.ContainsFunc(rep.StartupLog, func(l string) bool { return strings.Contains(l, "anvil-testos: ignition files: ok") }) {
		t.Errorf("report: the startup log does not carry this boot's Ignition lines; it has %d lines, the last: %q", len(rep.StartupLog), rep.StartupLog[len(rep.StartupLog)-1])
	}
	// Secrets stay out of the journal (and so the report) and out of what
	// the init and the services print; only the kernel echoes its own
	// command line, per-boot token included, as it does on Flatcar.
	var printed []string
	for _, l := range strings.Split(w.ConsoleText(), "\n") {
		if !strings.Contains(l, "ommand line: ") {
			printed = append(printed, l)
		}
	}
	for where, text := range map[string]string{"the report": rep.Raw, "the console": strings.Join(printed, "\n")} {
		if strings.Contains(text, credential) {
			t.Errorf("%s contains the agent credential", where)
		}
		if strings.Contains(text, bootToken) {
			t.Errorf("%s contains the per-boot token", where)
		}
	}
	t.Logf("the report's startup_log has %d lines; the first and last three:\n%s\n...\n%s", len(rep.StartupLog),
		strings.Join(rep.StartupLog[:min(3, len(rep.StartupLog))], "\n"), strings.Join(rep.StartupLog[max(0, len(rep.StartupLog)-3):], "\n"))

	// A reboot instruction into the next revision: the agent accepts it,
	// runs `systemctl reboot`, and the VM comes back through Ignition.
	srv.Issue(vmtest.Instruction{ID: "i-1", Kind: "reboot", Revision: revision(2), IssuedAt: time.Now().UTC().Format(time.RFC3339)})
	w.Until("the agent's accepted ack", 3*time.Minute, func() bool {
		_, _, _, acks, _ := srv.Snapshot()
		return slices.ContainsFunc(acks, func(a vmtest.Ack) bool { return a.ID == "i-1" && a.Status == "accepted" })
	})
	w.Until("the second boot's Ignition fetch", 8*time.Minute, func() bool {
		fetches, _, _, _, _ := srv.Snapshot()
		return len(fetches) >= 2
	})
	w.Until("a heartbeat from the second boot", 8*time.Minute, func() bool {
		_, hbs, _, _, _ := srv.Snapshot()
		return slices.ContainsFunc(hbs, func(h vmtest.Heartbeat) bool { return h.BootedRevision == revision(2) })
	})
	fetches, hbs, _, acks, problems := srv.Snapshot()
	accepted := acks[slices.IndexFunc(acks, func(a vmtest.Ack) bool { return a.ID == "i-1" && a.Status == "accepted" })].At
	secondFetch := fetches[1].At
	secondHeartbeat := hbs[slices.IndexFunc(hbs, func(h vmtest.Heartbeat) bool { return h.BootedRevision == revision(2) })].At
	if len(problems) > 0 {
		t.Errorf("the server refused requests (wrong UUID, credential or route): %v", problems)
	}
	if n := w.Reboots(); n != 1 {
		t.Errorf("the guest rebooted %d times, want 1", n)
	}
	out = w.ConsoleText()
	if !strings.Contains(out, "anvil-testos: reboot requested: stopping services") {
		t.Error("the console does not show the init's reboot")
	}
	if n := strings.Count(out, "anvil-testos: ignition files: ok"); n < 2 {
		t.Errorf("the files stage succeeded %d times, want 2 (one per boot)", n)
	}

	t.Logf("power-on -> first heartbeat: %.1fs", firstHeartbeat.Sub(powerOn).Seconds())
	t.Logf("reboot accepted -> second Ignition fetch: %.1fs", secondFetch.Sub(accepted).Seconds())
	t.Logf("reboot accepted -> second boot's first heartbeat: %.1fs", secondHeartbeat.Sub(accepted).Seconds())
	if t.Failed() || testing.Verbose() {
		t.Logf("console:\n%s", w.ConsoleText())
	}
}
