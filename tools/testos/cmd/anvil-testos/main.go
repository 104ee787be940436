// Command anvil-testos is the one program of the anvil test OS that is
// not upstream: the init (PID 1, installed as /init) and the commands
// that stand in for what Flatcar ships, chosen by the name it is run as
// (the image links each name to this binary):
//
//	init                    the init; see internal/boot
//	systemctl               reboot, poweroff, halt, is-enabled, disable, daemon-reload
//	journalctl              -b --no-pager -o short-iso -n N: this boot's log
//	useradd, usermod, userdel, groupadd, groupmod, groupdel
//	                        what Ignition's files stage calls with --root
//	ignition-kargs-helper   refuses kernelArguments (no boot partition)
//
// "anvil-testos <name> args..." runs a command by name.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvil-fleet/anvil/tools/testos/internal/boot"
	"github.com/anvil-fleet/anvil/tools/testos/internal/journal"
	"github.com/anvil-fleet/anvil/tools/testos/internal/passwd"
	"github.com/anvil-fleet/anvil/tools/testos/internal/shim"
)

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if os.Getpid() == 1 {
		name = "init"
	} else if name == "anvil-testos" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	os.Exit(run(name, args))
}

func run(name string, args []string) int {
	switch name {
	case "init":
		if os.Getpid() != 1 {
			fmt.Fprintln(os.Stderr, "anvil-testos: init must run as PID 1 (it is the test OS's /init)")
			return 1
		}
		boot.Main()
		return 0 // not reached
	case "systemctl":
		return shim.Systemctl(args, os.Stdout, os.Stderr)
	case "journalctl":
		return shim.Journalctl(args, journal.Path, os.Stdout, os.Stderr)
	case "ignition-kargs-helper":
		return shim.KargsHelper(args, os.Stderr)
	case "useradd", "usermod", "userdel", "groupadd", "groupmod", "groupdel":
		o, err := passwd.ParseArgs(name, args)
		if err == nil {
			err = passwd.Run(name, o)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "anvil-testos: unknown command %q (init, systemctl, journalctl, useradd, usermod, userdel, groupadd, groupmod, groupdel, ignition-kargs-helper)\n", name)
		return 2
	}
}
