package main

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A malformed setting stops the program with exit code 2 and names the
// setting, instead of silently becoming the default.
func TestMalformedSettingsStopTheProgram(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_REVISIONS_RENDER_CACHE_BYTES=64MiB", "ANVIL_LOG_FORMAT=xml"}, nil,
		`ANVIL_REVISIONS_RENDER_CACHE_BYTES="64MiB"`, `--log-format (env ANVIL_LOG_FORMAT) = "xml"`)
}
