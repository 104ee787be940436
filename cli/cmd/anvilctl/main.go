// Command anvilctl is the command line client of the anvil API: kubectl
// habits (get, describe, apply, diff, delete, rollout status --watch) over
// the gateway's HTTP API. See docs/cli.md.
package main

import (
	"os"

	"github.com/anvil-fleet/anvil/cli/anvilctl"
)

// version is set at build time (-ldflags "-X main.version=…"), as for the
// other anvil binaries; anvilctl.Version may be set instead.
var version string

func main() {
	if version != "" {
		anvilctl.Version = version
	}
	os.Exit(anvilctl.Main(os.Args[1:]))
}
