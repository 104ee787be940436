// Command anvilctl is the command line client of the anvil API: kubectl
// habits (get, describe, apply, delete, rollout status --watch) over the
// gateway's HTTP API. See docs/cli.md.
package main

import (
	"os"

	"github.com/anvil-fleet/anvil/cli/anvilctl"
)

func main() {
	os.Exit(anvilctl.Main(os.Args[1:]))
}
