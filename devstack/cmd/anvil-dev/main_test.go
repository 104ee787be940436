package main

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// make run refuses a malformed setting before it starts anything.
func TestMalformedSettingsStopTheDevStack(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_LOG_LEVEL=chatty"}, nil, `--log-level (env ANVIL_LOG_LEVEL) = "chatty"`)
	maintest.ExpectRefused(t, nil, []string{"--data-dir", "/tmp/x", "up"}, `unexpected argument "up"`)
}
