// Package shim implements the systemctl and journalctl commands of the
// test OS: just what Ignition and anvil-agent call. The agent runs them
// from its chroot (/sysroot, where /run is the init's /run), so they talk
// to the init only through /run and signals to PID 1.
package shim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/anvil-fleet/anvil/tools/testos/internal/journal"
	"github.com/anvil-fleet/anvil/tools/testos/internal/units"
)

// Signals the init understands; the same as busybox init's, so busybox's
// own reboot/poweroff/halt also work.
const (
	SignalReboot   = syscall.SIGTERM
	SignalPoweroff = syscall.SIGUSR2
	SignalHalt     = syscall.SIGUSR1
)

const readme = "see tools/testos/README.md in the anvil repository"

// Usage errors exit 1 with the message on stderr.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// SystemctlArgs is a parsed systemctl command line.
type SystemctlArgs struct {
	Verb    string
	Units   []string
	Root    string
	Message string
	Force   int
}

// ParseSystemctl reads the verbs and flags the test OS supports.
func ParseSystemctl(args []string) (SystemctlArgs, error) {
	var a SystemctlArgs
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--root" && i+1 < len(args):
			i++
			a.Root = args[i]
		case strings.HasPrefix(arg, "--root="):
			a.Root = strings.TrimPrefix(arg, "--root=")
		case strings.HasPrefix(arg, "--message="):
			a.Message = strings.TrimPrefix(arg, "--message=")
		case arg == "--force" || arg == "-f":
			a.Force++
		case arg == "-ff":
			a.Force += 2
		case arg == "--no-block" || arg == "--no-pager" || arg == "-q" || arg == "--quiet" || arg == "--no-wall" || arg == "--system":
		case strings.HasPrefix(arg, "-"):
			return a, usageError{fmt.Sprintf("systemctl: option %s is not supported by the anvil test OS (%s)", arg, readme)}
		case a.Verb == "":
			a.Verb = arg
		default:
			a.Units = append(a.Units, arg)
		}
	}
	if a.Verb == "" {
		return a, usageError{"systemctl: no verb given; this test OS supports reboot, poweroff, halt, is-enabled, disable and daemon-reload"}
	}
	return a, nil
}

// Systemctl runs the systemctl shim and returns the exit code.
func Systemctl(args []string, stdout, stderr io.Writer) int {
	a, err := ParseSystemctl(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	root := a.Root
	if root == "" {
		root = "/"
	}
	switch a.Verb {
	case "reboot", "poweroff", "halt":
		return powerAction(a, stderr)
	case "daemon-reload":
		return 0 // units are read when they start; nothing is cached
	case "is-enabled":
		return isEnabled(root, a.Units, stdout, stderr)
	case "disable":
		return disable(root, a.Units, stderr)
	default:
		fmt.Fprintf(stderr, "systemctl: %q is not supported by the anvil test OS, which has no systemd (%s)\n", a.Verb, readme)
		return 1
	}
}

func powerAction(a SystemctlArgs, stderr io.Writer) int {
	msg := a.Verb + " requested"
	if a.Message != "" {
		msg += ": " + a.Message
	}
	logLine("systemctl", msg)
	if a.Force >= 2 {
		// systemctl -ff: immediately, without stopping services.
		syscall.Sync()
		cmd := map[string]int{"reboot": syscall.LINUX_REBOOT_CMD_RESTART, "poweroff": syscall.LINUX_REBOOT_CMD_POWER_OFF, "halt": syscall.LINUX_REBOOT_CMD_HALT}[a.Verb]
		if err := syscall.Reboot(cmd); err != nil {
			fmt.Fprintf(stderr, "systemctl: %s: %v\n", a.Verb, err)
			return 1
		}
		return 0
	}
	sig := map[string]syscall.Signal{"reboot": SignalReboot, "poweroff": SignalPoweroff, "halt": SignalHalt}[a.Verb]
	// Like systemctl, return once the shutdown is queued: the init stops
	// the services (SIGTERM, so the agent exits cleanly) and reboots.
	if err := syscall.Kill(1, sig); err != nil {
		fmt.Fprintf(stderr, "systemctl: %s: signalling the init (PID 1): %v\n", a.Verb, err)
		return 1
	}
	return 0
}

func isEnabled(root string, names []string, stdout, stderr io.Writer) int {
	if len(names) == 0 {
		fmt.Fprintln(stderr, "systemctl: is-enabled needs a unit name")
		return 1
	}
	rules, err := units.Presets(root)
	if err != nil {
		fmt.Fprintln(stderr, "systemctl:", err)
		return 1
	}
	wants := units.WantsLinks(root)
	code := 0
	for _, n := range names {
		u, err := units.Load(root, n)
		state := "disabled"
		switch {
		case err != nil && errors.Is(err, units.ErrNotFound):
			state = "not-found"
		case err == nil && u.Masked:
			state = "masked"
		case units.PresetEnabled(rules, n) || contains(wants, n):
			state = "enabled"
		}
		fmt.Fprintln(stdout, state)
		if state != "enabled" {
			code = 1
		}
	}
	return code
}

func disable(root string, names []string, stderr io.Writer) int {
	for _, n := range names {
		for _, t := range units.BootTargets {
			for _, kind := range []string{".wants", ".requires"} {
				p := filepath.Join(root, "/etc/systemd/system", t+kind, n)
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					fmt.Fprintf(stderr, "systemctl: disable %s: %v\n", n, err)
					return 1
				}
			}
		}
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// logLine appends a line to the journal as ident[pid], best effort: a
// shim must not fail because the journal cannot be written.
func logLine(ident, msg string) {
	w, err := journal.Open(journal.Path, nil, nil)
	if err != nil {
		return
	}
	w.Log(ident, os.Getpid(), msg, false)
}

// JournalctlArgs is a parsed journalctl command line.
type JournalctlArgs struct {
	Lines  int    // -1: all
	Output string // short-iso or short
}

// ParseJournalctl reads -b, --no-pager, -q, -o/--output and -n/--lines.
func ParseJournalctl(args []string) (JournalctlArgs, error) {
	a := JournalctlArgs{Lines: -1, Output: "short"}
	lines := func(v string) error {
		if v == "all" {
			a.Lines = -1
			return nil
		}
		n, err := strconv.Atoi(strings.TrimPrefix(v, "+"))
		if err != nil || n < 0 {
			return usageError{fmt.Sprintf("journalctl: bad line count %q", v)}
		}
		a.Lines = n
		return nil
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		next := func() (string, bool) {
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		var err error
		switch {
		case arg == "-b" || arg == "--boot" || arg == "-b0" || arg == "--boot=0" || arg == "--no-pager" || arg == "-q" || arg == "--quiet":
		case arg == "-o" || arg == "--output":
			v, ok := next()
			if !ok {
				return a, usageError{"journalctl: -o needs a value"}
			}
			a.Output = v
		case strings.HasPrefix(arg, "--output="):
			a.Output = strings.TrimPrefix(arg, "--output=")
		case strings.HasPrefix(arg, "-o"):
			a.Output = strings.TrimPrefix(arg, "-o")
		case arg == "-n" || arg == "--lines":
			// "-n" alone means 10, as in journalctl.
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				v, _ := next()
				err = lines(v)
			} else {
				a.Lines = 10
			}
		case strings.HasPrefix(arg, "--lines="):
			err = lines(strings.TrimPrefix(arg, "--lines="))
		case strings.HasPrefix(arg, "-n"):
			err = lines(strings.TrimPrefix(arg, "-n"))
		default:
			return a, usageError{fmt.Sprintf("journalctl: option %s is not supported by the anvil test OS (%s)", arg, readme)}
		}
		if err != nil {
			return a, err
		}
	}
	if a.Output != "short-iso" && a.Output != "short" {
		return a, usageError{fmt.Sprintf("journalctl: output %q is not supported by the anvil test OS (short and short-iso are)", a.Output)}
	}
	return a, nil
}

// Journalctl prints the tail of this boot's journal and returns the exit
// code.
func Journalctl(args []string, path string, stdout, stderr io.Writer) int {
	a, err := ParseJournalctl(args)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "journalctl: %v (the anvil test OS's init writes this boot's log there)\n", err)
		return 1
	}
	defer f.Close()
	lines, err := journal.Tail(f, a.Lines)
	if err != nil {
		fmt.Fprintln(stderr, "journalctl:", err)
		return 1
	}
	for _, l := range lines {
		if a.Output == "short" {
			l = journal.Short(l)
		}
		fmt.Fprintln(stdout, l)
	}
	return 0
}

// KargsHelper stands in for ignition-kargs-helper: kernel arguments of a
// network-booted machine come from the iPXE script, not from a boot
// partition, so a config that asks to change them fails with this reason.
func KargsHelper(args []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "ignition-kargs-helper: kernelArguments (%s) cannot be applied: the anvil test OS boots from the network and has no boot partition to write them to (%s)\n", strings.Join(args, " "), readme)
	return 1
}
