package main

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A malformed setting stops the program with exit code 2 and names the
// setting, instead of silently becoming the default.
func TestMalformedSettingsStopTheProgram(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_REGISTRY_OFFLINE_AFTER=5minutes", "ANVIL_STREAM_REPLICAS=three"}, nil,
		`ANVIL_REGISTRY_OFFLINE_AFTER="5minutes"`, `ANVIL_STREAM_REPLICAS="three"`)
	maintest.ExpectRefused(t, nil, []string{"--offline-after=-1s"}, "--offline-after (env ANVIL_REGISTRY_OFFLINE_AFTER) = -1s: must be positive")
	maintest.ExpectRefused(t, nil, []string{"--offline-after", "5minutes"}, `invalid value "5minutes" for flag -offline-after`)
	maintest.ExpectRefused(t, nil, []string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag")
	maintest.ExpectRefused(t, nil, []string{"serve"}, `unexpected argument "serve"`)
}
