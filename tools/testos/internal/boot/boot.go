// Package boot is the init (PID 1) of the anvil test OS. It does what
// Flatcar's initramfs and first boot do for a PXE-booted machine, in one
// process: mount the API filesystems, load the virtio modules, bring the
// network up with DHCP, run the real Ignition's stages against /sysroot,
// and then start the services Ignition enabled, chrooted into /sysroot,
// the way systemd's first boot would.
//
// Its structure follows the two root modes of the image:
//   - tmpfs (phase 1, built now): /sysroot is an empty tmpfs with a
//     Flatcar-like base layout and the image's /usr bound read-only; the
//     init itself supervises the services.
//   - rootfs (phase 2, the kubernetes variant): the initrd also carries a
//     Debian root file system as a squashfs; /sysroot is a tmpfs seeded
//     with its /etc, /var, ... and its /usr bound read-only, and after
//     Ignition the init switch_roots into its systemd (see rootfs.go).
package boot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/anvil-fleet/anvil/tools/testos/internal/journal"
	"github.com/anvil-fleet/anvil/tools/testos/internal/shim"
)

// Paths inside the image (see tools/testos/build.sh, which lays them out).
const (
	sysroot      = "/sysroot"
	libDir       = "/usr/lib/anvil-testos"
	modulesList  = libDir + "/modules"         // module files to load, in order, relative to /usr/lib/modules/<release>/
	udhcpcScript = libDir + "/udhcpc.script"   // busybox udhcpc hook
	rootfsImage  = libDir + "/rootfs.squashfs" // root mode rootfs: a Debian root file system
	runDir       = "/run/anvil-testos"
	netDir       = runDir + "/net" // <ifname>.lease files written by the udhcpc hook
	ignitionBin  = "/usr/bin/ignition"
	ident        = "anvil-testos"
)

// rootMode says what /sysroot is (see the package comment).
type rootMode string

const (
	tmpfsRoot  rootMode = "tmpfs"
	rootfsRoot rootMode = "rootfs"
)

type system struct {
	start     time.Time
	kernelUp  time.Duration // uptime when the init started
	log       *journal.Writer
	reaper    *reaper
	cmdline   map[string]string
	mode      rootMode
	hostMu    sync.Mutex
	host      string
	signals   chan os.Signal
	svcMu     sync.Mutex
	services  []*service
	stopping  bool
	netOnce   sync.Once
	netUp     chan struct{}
	dhcpProcs []*proc
}

// Main runs the init. It never returns: PID 1 exiting panics the kernel,
// so a failure ends in emergency(), which keeps saying why.
func Main() {
	s := &system{start: time.Now(), host: "localhost", netUp: make(chan struct{})}
	// Signals first, so that a reboot request is never lost.
	s.signals = make(chan os.Signal, 4)
	signal.Notify(s.signals, shim.SignalReboot, shim.SignalPoweroff, shim.SignalHalt, syscall.SIGINT)
	go s.handleSignals()
	defer func() {
		if r := recover(); r != nil {
			s.emergency(fmt.Sprintf("the init crashed: %v", r))
		}
	}()
	s.boot()
}

func (s *system) hostname() string {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	return s.host
}

// say prints an init line on the console and in the journal.
func (s *system) say(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if s.log == nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", ident, journal.Redact(msg))
		return
	}
	s.log.Log(ident, 0, msg, true)
}

// note records a line in the journal only.
func (s *system) note(format string, args ...any) {
	if s.log != nil {
		s.log.Log(ident, 0, fmt.Sprintf(format, args...), false)
	}
}

func (s *system) since() string {
	return fmt.Sprintf("%.1fs", time.Since(s.start).Seconds())
}

func (s *system) boot() {
	os.Setenv("PATH", "/usr/sbin:/usr/bin")
	if err := mountAPIFilesystems(); err != nil {
		s.emergency(err.Error())
	}
	attachConsole()
	s.kernelUp = uptime()
	w, err := journal.Open(journal.Path, os.Stdout, s.hostname)
	if err != nil {
		s.say("cannot open the journal %s: %v; logging to the console only", journal.Path, err)
		w = journal.New(nil, os.Stdout, s.hostname)
	}
	s.log = w
	s.followKernelLog()
	s.reaper = newReaper()

	release := kernelRelease()
	s.say("anvil test OS (a Flatcar PXE stand-in) starting on Linux %s, %.1fs after the kernel started", release, s.kernelUp.Seconds())
	s.cmdline = readCmdline()

	s.loadModules(release)
	s.startNetwork()

	s.mode = tmpfsRoot
	if _, err := os.Stat(rootfsImage); err == nil {
		s.mode = rootfsRoot
	}
	s.say("root mode: %s", s.mode)

	if _, firstBoot := s.cmdline["flatcar.first_boot"]; firstBoot {
		s.runIgnitionUntilItSucceeds()
	} else {
		if s.mode == rootfsRoot {
			s.say("flatcar.first_boot is not on the kernel command line: Ignition does not run (as on Flatcar); /sysroot is the root file system as built")
		} else {
			s.say("flatcar.first_boot is not on the kernel command line: Ignition does not run (as on Flatcar); /sysroot stays empty")
		}
		if err := s.prepareSysroot(); err != nil {
			s.emergency("preparing " + sysroot + ": " + err.Error())
		}
	}

	s.setHostname()
	if s.mode == rootfsRoot {
		// systemd starts the units Ignition enabled; nothing of the
		// phase 1 emulation runs.
		err := s.switchToSystemd()
		s.emergency("switching root to systemd: " + err.Error())
	}
	if err := bindAPIFilesystems(sysroot); err != nil {
		s.emergency("binding /proc, /sys, /dev and /run into " + sysroot + ": " + err.Error())
	}
	s.startServices()
	s.say("startup finished in %.1fs (kernel %.1fs + init %s)", (s.kernelUp + time.Since(s.start)).Seconds(), s.kernelUp.Seconds(), s.since())
	select {} // the signal handler and the supervisors do the rest
}

// handleSignals turns systemctl's (and busybox's) requests into a shutdown.
func (s *system) handleSignals() {
	for sig := range s.signals {
		switch sig {
		case shim.SignalReboot, syscall.SIGINT:
			s.shutdown("reboot", syscall.LINUX_REBOOT_CMD_RESTART)
		case shim.SignalPoweroff:
			s.shutdown("power-off", syscall.LINUX_REBOOT_CMD_POWER_OFF)
		case shim.SignalHalt:
			s.shutdown("halt", syscall.LINUX_REBOOT_CMD_HALT)
		}
	}
}

// shutdown stops the services (SIGTERM, then SIGKILL after 10 s), syncs
// and resets the machine. It does not return.
func (s *system) shutdown(what string, cmd int) {
	s.say("%s requested: stopping services", what)
	s.svcMu.Lock()
	s.stopping = true
	svcs := append([]*service(nil), s.services...)
	dhcp := append([]*proc(nil), s.dhcpProcs...)
	s.svcMu.Unlock()
	var wg sync.WaitGroup
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			svc.stop(10 * time.Second)
		}()
	}
	wg.Wait()
	for _, p := range dhcp {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	_ = syscall.Kill(-1, syscall.SIGKILL) // everything else; PID 1 is spared
	syscall.Sync()
	_ = syscall.Unmount(sysroot, syscall.MNT_DETACH)
	syscall.Sync()
	s.say("%s now", what)
	if err := syscall.Reboot(cmd); err != nil {
		s.emergency(fmt.Sprintf("%s failed: %v", what, err))
	}
	select {}
}

// emergency keeps saying why the boot cannot go on, so a console never
// shows a silent hang; a reboot request (SIGTERM) still works.
func (s *system) emergency(reason string) {
	s.say("EMERGENCY: %s", reason)
	s.say("the boot cannot continue; power-cycle the machine (the reason is repeated every 60s)")
	for {
		time.Sleep(60 * time.Second)
		s.say("EMERGENCY (still): %s", reason)
	}
}

// mountAPIFilesystems mounts /proc, /sys, /dev and /run.
func mountAPIFilesystems() error {
	for _, m := range []struct {
		src, target, fstype, data string
		flags                     uintptr
	}{
		{"proc", "/proc", "proc", "", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC},
		{"sysfs", "/sys", "sysfs", "", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755", syscall.MS_NOSUID},
		{"devpts", "/dev/pts", "devpts", "gid=5,mode=620,ptmxmode=000", syscall.MS_NOSUID | syscall.MS_NOEXEC},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777", syscall.MS_NOSUID | syscall.MS_NODEV},
		{"tmpfs", "/run", "tmpfs", "mode=0755", syscall.MS_NOSUID | syscall.MS_NODEV},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", m.target, err)
		}
		if err := syscall.Mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return os.MkdirAll(runDir, 0o755)
}

// attachConsole points stdio at /dev/console: the kernel gives PID 1 the
// console only if the initramfs has /dev/console, and devtmpfs has it now.
func attachConsole() {
	f, err := os.OpenFile("/dev/console", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return
	}
	for _, fd := range []int{1, 2} {
		_ = syscall.Dup3(int(f.Fd()), fd, 0)
	}
	if null, err := os.Open("/dev/null"); err == nil {
		_ = syscall.Dup3(int(null.Fd()), 0, 0)
	}
}

func uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return time.Duration(v * float64(time.Second))
}

func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func readCmdline() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	return parseCmdline(string(b))
}

// parseCmdline splits the kernel command line into key=value pairs (a
// bare word maps to ""); double quotes group, and the last value wins.
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	var cur strings.Builder
	inQuote := false
	flush := func() {
		if cur.Len() > 0 {
			k, v, _ := strings.Cut(cur.String(), "=")
			out[k] = v
			cur.Reset()
		}
	}
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
		case !inQuote && (r == ' ' || r == '\t' || r == '\n'):
			flush()
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return out
}

// loadModules inserts the modules listed in the image, in order. Each
// failure is printed; a module that is already there is fine.
func (s *system) loadModules(release string) {
	data, err := os.ReadFile(modulesList)
	if err != nil {
		s.say("no module list (%v): loading no kernel modules", err)
		return
	}
	var loaded []string
	for _, rel := range strings.Fields(string(data)) {
		p := filepath.Join("/usr/lib/modules", release, rel)
		name := strings.TrimSuffix(filepath.Base(rel), ".ko")
		img, err := os.ReadFile(p)
		if err == nil && len(img) == 0 {
			err = errors.New("empty file")
		}
		if err != nil {
			s.say("module %s: %v (was the image built for kernel %s?)", name, err, release)
			continue
		}
		params := []byte{0}
		// Modules are stored uncompressed, so init_module(2) takes them as
		// they are (busybox's insmod could not read .ko.xz either).
		_, _, errno := syscall.Syscall(syscall.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&img[0])), uintptr(len(img)), uintptr(unsafe.Pointer(&params[0])))
		if errno != 0 && errno != syscall.EEXIST {
			s.say("module %s: init_module: %v", name, errno)
			continue
		}
		loaded = append(loaded, name)
	}
	s.say("loaded %d kernel modules: %s", len(loaded), strings.Join(loaded, " "))
}

// setHostname applies /sysroot/etc/hostname, as systemd does early in boot.
func (s *system) setHostname() {
	b, err := os.ReadFile(filepath.Join(sysroot, "etc/hostname"))
	if err != nil {
		s.say("no /etc/hostname: the hostname stays %q", s.hostname())
		return
	}
	name := string(bytes.TrimSpace(bytes.SplitN(b, []byte("\n"), 2)[0]))
	if name == "" {
		return
	}
	if err := syscall.Sethostname([]byte(name)); err != nil {
		s.say("setting the hostname to %q: %v", name, err)
		return
	}
	s.hostMu.Lock()
	s.host = name
	s.hostMu.Unlock()
	s.say("hostname: %s", name)
}
