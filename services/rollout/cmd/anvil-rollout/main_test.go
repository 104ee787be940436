package main

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A malformed setting stops the program with exit code 2 and names the
// setting, instead of silently becoming the default.
func TestMalformedSettingsStopTheProgram(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_ROLLOUT_POLL=2", "ANVIL_LOG_LEVEL=verbose"}, nil,
		`ANVIL_ROLLOUT_POLL="2"`, `--log-level (env ANVIL_LOG_LEVEL) = "verbose"`)
	maintest.ExpectRefused(t, []string{"ANVIL_ROLLOUT_REMEDIATION_MAX_IN_FLIGHT=-1"}, nil, "--remediation-max-in-flight")
}
