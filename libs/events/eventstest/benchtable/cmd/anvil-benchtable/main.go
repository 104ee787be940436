// anvil-benchtable reads `go test -bench` output on standard input and
// prints one table of every benchmark's ratios and figures (make bench).
package main

import (
	"fmt"
	"os"

	"github.com/anvil-fleet/anvil/libs/events/eventstest/benchtable"
)

func main() {
	results, err := benchtable.Parse(os.Stdin)
	if err == nil && len(results) == 0 {
		err = fmt.Errorf("no benchmark result in the input")
	}
	if err == nil {
		err = benchtable.Write(os.Stdout, results)
	}
	if n := benchtable.Failures(results); err == nil && n > 0 {
		err = fmt.Errorf("benchmarks failed: %d (FAILED in the table; their logs are in the input)", n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "anvil-benchtable:", err)
		os.Exit(1)
	}
}
