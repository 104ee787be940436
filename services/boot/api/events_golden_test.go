package api_test

import (
	"flag"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/eventstest/golden"
	"github.com/anvil-fleet/anvil/services/boot/api"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/events/*.json from the Go types")

// TestEventsGolden freezes the JSON of the boot instructions the rollout
// service stores on a rollout's subject and the boot service reads back:
// events already in the log must read back the same.
func TestEventsGolden(t *testing.T) {
	golden.Events(t, golden.Dir, api.EventTypes(), *updateGolden)
}
