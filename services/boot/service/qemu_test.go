package service_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// TestRealFirmware boots a QEMU virtual machine whose NIC option ROM is
// iPXE (Debian's ipxe-qemu), in software emulation, with DHCP pointing it at
// /boot.ipxe on the boot service on the host's loopback (QEMU's user
// network maps 10.0.2.2 to it). Real iPXE runs the chain script, expands
// ${uuid} and ${net0/mac:hexhyp}, registers the machine under its SMBIOS
// UUID, shows the wait message on its serial console, sleeps and asks
// again; once the machine is assigned, iPXE runs the boot script's kernel
// line (the images are missing here, a 404, which exercises the script's
// fallback) and keeps retrying. The test ends by itself within two minutes
// and kills QEMU at cleanup.
func TestRealFirmware(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is not installed (apt-get install -y qemu-system-x86 ipxe-qemu)")
	}
	if testing.Short() {
		t.Skip("boots a virtual machine; skipped with -short")
	}
	started := time.Now()
	// The simulator's assets and an empty Flatcar mirror.
	s := newStack(t, func(o *stackOptions) {
		o.boot = func(c *service.Config) { c.AssetBaseURL = "/flatcar" }
	})
	if err := os.MkdirAll(filepath.Join(s.assets, "flatcar"), 0o755); err != nil {
		t.Fatal(err)
	}
	enroll := s.org("acme")
	s.pool("acme", "workers")
	const uuid = "4c4c4544-0035-4b10-8056-b7c04f4e35a1"
	_, port, _ := net.SplitHostPort(s.boot.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serial := filepath.Join(t.TempDir(), "serial.log")
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "accel=tcg", "-m", "256", "-nographic", "-display", "none", "-monitor", "none",
		"-uuid", uuid,
		"-netdev", "user,id=n0,bootfile=http://10.0.2.2:"+port+"/boot.ipxe?token="+enroll,
		"-device", "virtio-net-pci,netdev=n0", "-boot", "n",
		"-serial", "file:"+serial,
	)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out := &eventstest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	console := func() string { b, _ := os.ReadFile(serial); return string(b) }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-exited:
				t.Fatalf("QEMU exited before %s: %v\n%s\nconsole:\n%s", what, err, out.String(), console())
			case <-ctx.Done():
				t.Fatalf("%s: not within 2 minutes\nconsole:\n%s", what, console())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}

	// The firmware registers the machine under its SMBIOS UUID.
	var m = func() regapi.Machine { got, _ := s.machine("acme", uuid); return got }
	waitFor("the machine registers", func() bool { return m().Status == regapi.StatusReadyUnassigned })
	if got := m(); got.MAC != "52:54:00:12:34:56" || got.LastIPXEBootAt.IsZero() {
		t.Errorf("registered as %+v", got)
	}
	// Its console says what is happening, and it asks again.
	waitFor("the wait message on the console", func() bool {
		return strings.Contains(console(), "anvil: waiting to be assigned to a machine pool")
	})
	waitFor("the retry", func() bool { return strings.Contains(console(), "(attempt 2)") })

	// Assigned, it is told to boot Flatcar: real iPXE runs the kernel line
	// with its Ignition URL, gets a 404 for the missing image and falls
	// back to asking again.
	s.assign("acme", uuid, "workers", 1)
	waitFor("the boot script runs", func() bool {
		return strings.Contains(console(), "anvil: could not load Flatcar from")
	})
	c := console()
	for _, want := range []string{"revision 1 of pool workers: Flatcar stable 4230.2.3", "/flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz"} {
		if !strings.Contains(c, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if strings.Contains(c, "iPXE>") || strings.Contains(c, "No more network devices") {
		t.Errorf("the firmware left the script:\n%s", c)
	}
	if i := strings.Index(c, "boot.ipxe..."); i >= 0 {
		t.Logf("serial console from the chain on:\n%s", c[i:])
	}
	t.Logf("real iPXE registered, waited, retried and ran the boot script in %s", time.Since(started).Round(time.Second))
}

// TestBuiltArtifact boots what services/boot/ipxe/build.sh makes from
// Debian's ipxe package (ipxe.lkrn with the chain script as its initrd)
// in QEMU, without any PXE setup: the machine registers through the
// embedded chain URL.
func TestBuiltArtifact(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is not installed (apt-get install -y qemu-system-x86 ipxe-qemu)")
	}
	if _, err := os.Stat("/usr/lib/ipxe/ipxe.lkrn"); err != nil {
		if _, err := os.Stat("/boot/ipxe.lkrn"); err != nil {
			t.Skip("Debian's ipxe package is not installed (apt-get install -y ipxe)")
		}
	}
	if testing.Short() {
		t.Skip("boots a virtual machine; skipped with -short")
	}
	s := newStack(t)
	enroll := s.org("acme")
	_, port, _ := net.SplitHostPort(s.boot.Addr)
	out := t.TempDir()
	build := exec.Command("bash", "../ipxe/build.sh", "--url", "http://10.0.2.2:"+port+"/boot.ipxe?token="+enroll, "--out", out)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	const uuid = "4c4c4544-0035-4b10-8056-b7c04f4e35a2"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serial := filepath.Join(t.TempDir(), "serial.log")
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "accel=tcg", "-m", "256", "-nographic", "-display", "none", "-monitor", "none",
		"-uuid", uuid, "-kernel", filepath.Join(out, "ipxe.lkrn"), "-initrd", filepath.Join(out, "anvil.ipxe"),
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0", "-serial", "file:"+serial,
	)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	console := func() string { b, _ := os.ReadFile(serial); return string(b) }
	for {
		if m, err := s.machine("acme", uuid); err == nil && m.Status == regapi.StatusReadyUnassigned {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("QEMU exited: %v\nconsole:\n%s", err, console())
		case <-ctx.Done():
			t.Fatalf("the machine did not register within 2 minutes\nconsole:\n%s", console())
		case <-time.After(200 * time.Millisecond):
		}
	}
	for !strings.Contains(console(), "anvil: waiting to be assigned to a machine pool") {
		select {
		case <-ctx.Done():
			t.Fatalf("no wait message on the console:\n%s", console())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
