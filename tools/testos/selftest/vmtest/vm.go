package vmtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// VMSpec is one QEMU virtual machine booting a test OS image directly
// (-kernel/-initrd, as iPXE would load the two files), under TCG, with
// user networking (the host's 127.0.0.1 is 10.0.2.2 inside).
type VMSpec struct {
	QEMU     string
	ImageDir string // holds flatcar_production_pxe.vmlinuz and flatcar_production_pxe_image.cpio.gz
	UUID     string // SMBIOS UUID, which the agent reads
	MemoryMB int
	Append   string      // kernel command line after initrd=…, before the consoles
	Server   *BootServer // what Waiter's failure messages report on
}

// StartVM starts the VM with its serial console in files and stops it
// when the test ends (copying the console to $ANVIL_TESTOS_CONSOLE). It
// returns the waiter and the power-on time.
//
// A reboot of the guest is a power cycle: QEMU runs with -no-reboot and
// is started again (same UUID, a fresh process) when the guest rebooted,
// as a real machine goes through its firmware again. A warm reset of the
// same QEMU process would do too, but under TCG the next boot's kernel
// then takes 50-175 s instead of 1-4 s to unpack the kubernetes variant's
// initramfs (measured; only after a boot that ran a lot of code).
func StartVM(t testing.TB, v VMSpec) (*Waiter, time.Time) {
	t.Helper()
	dir := t.TempDir()
	appendLine := strings.Join([]string{
		"initrd=flatcar_production_pxe_image.cpio.gz",
		v.Append,
		"console=tty0", "console=ttyS0,115200n8",
	}, " ")
	w := &Waiter{t: t, srv: v.Server, qemuDone: make(chan struct{}), stop: make(chan struct{})}
	// start starts QEMU for the next boot, unless the test has ended; the
	// lock makes the cleanup below see (and kill) any process it started.
	start := func() (*exec.Cmd, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-w.stop:
			return nil, errors.New("the test has ended")
		default:
		}
		console := filepath.Join(dir, fmt.Sprintf("console-%d.log", len(w.consoles)+1))
		w.consoles = append(w.consoles, console)
		cmd := exec.Command(v.QEMU,
			"-machine", "accel=tcg", "-m", strconv.Itoa(v.MemoryMB), "-nographic", "-no-user-config", "-no-reboot",
			"-uuid", v.UUID,
			"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0",
			"-kernel", filepath.Join(v.ImageDir, "flatcar_production_pxe.vmlinuz"),
			"-initrd", filepath.Join(v.ImageDir, "flatcar_production_pxe_image.cpio.gz"),
			"-append", appendLine,
			"-serial", "file:"+console, "-monitor", "none",
		)
		cmd.Stdout, cmd.Stderr = &w.qemuOut, &w.qemuOut
		// A test binary that is killed (go test's timeout, Ctrl-C) takes
		// the VM with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		w.proc = cmd.Process
		return cmd, nil
	}
	powerOn := time.Now()
	cmd, err := start()
	if err != nil {
		t.Fatalf("starting %s: %v", v.QEMU, err)
	}
	go func() {
		defer close(w.qemuDone)
		for {
			err := cmd.Wait()
			select {
			case <-w.stop:
				return
			default:
			}
			last := w.lastConsole()
			if err != nil || !strings.Contains(last[max(0, len(last)-4096):], "reboot: Restarting system") {
				w.mu.Lock()
				w.qemuErr = err
				w.mu.Unlock()
				return
			}
			w.mu.Lock()
			w.reboots++
			w.mu.Unlock()
			if cmd, err = start(); err != nil {
				w.mu.Lock()
				w.qemuErr = fmt.Errorf("starting QEMU again after the guest rebooted: %w", err)
				w.mu.Unlock()
				return
			}
		}
	}()
	t.Cleanup(func() {
		w.mu.Lock()
		close(w.stop)
		_ = w.proc.Kill()
		w.mu.Unlock()
		<-w.qemuDone
		if dst := os.Getenv("ANVIL_TESTOS_CONSOLE"); dst != "" {
			_ = os.WriteFile(dst, []byte(w.ConsoleText()), 0o644)
		}
	})
	return w, powerOn
}

// Waiter polls for conditions and, when one does not come, fails with what
// the VM printed and what the server saw.
type Waiter struct {
	t        testing.TB
	srv      *BootServer
	qemuDone chan struct{} // closed when QEMU exited for good; then qemuErr is set
	stop     chan struct{} // closed when the test ends

	mu       sync.Mutex
	proc     *os.Process // the QEMU of this boot
	consoles []string    // one file per boot
	reboots  int
	qemuErr  error
	qemuOut  syncBuffer
}

// ConsoleText is the serial console so far, every boot's in order.
func (w *Waiter) ConsoleText() string {
	w.mu.Lock()
	files := append([]string(nil), w.consoles...)
	w.mu.Unlock()
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}

// Reboots is how many times the guest rebooted (and QEMU was started
// again).
func (w *Waiter) Reboots() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reboots
}

func (w *Waiter) lastConsole() string {
	w.mu.Lock()
	f := w.consoles[len(w.consoles)-1]
	w.mu.Unlock()
	b, _ := os.ReadFile(f)
	return string(b)
}

// Until polls cond every 250 ms until it holds; it fails the test when
// QEMU exits or timeout passes (or the test's deadline comes closer than
// 30 s), saying what it waited for.
func (w *Waiter) Until(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	if d, ok := w.t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok && time.Until(dl)-30*time.Second < timeout {
			timeout = max(time.Until(dl)-30*time.Second, time.Second)
		}
	}
	deadline := time.Now().Add(timeout)
	for !cond() {
		select {
		case <-w.qemuDone:
			w.mu.Lock()
			err := w.qemuErr
			w.mu.Unlock()
			w.t.Fatalf("QEMU exited (%v) while waiting for %s\nQEMU said: %s\n%s", err, what, w.qemuOut.String(), w.diagnostics())
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no %s within %s\n%s", what, timeout, w.diagnostics())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *Waiter) diagnostics() string {
	s := ""
	if w.srv != nil {
		fetches, hbs, reps, acks, problems := w.srv.Snapshot()
		s = fmt.Sprintf("server saw %d Ignition fetches, %d heartbeats, %d reports, acks %+v, refused %v\n",
			len(fetches), len(hbs), len(reps), acks, problems)
	}
	return s + "console:\n" + w.ConsoleText()
}

// syncBuffer is a bytes.Buffer that QEMU's output goroutine and the test
// may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
