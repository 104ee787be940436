package org_test

import (
	"flag"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/eventstest/golden"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/events/*.json from the Go types")

// TestEventsGolden freezes the JSON of every event the registry service stores
// in this package: events already in the log must read back the same.
func TestEventsGolden(t *testing.T) {
	golden.Events(t, golden.Dir, org.EventTypes(), *updateGolden)
}
