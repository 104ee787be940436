package main

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A malformed setting stops the program with exit code 2 and names the
// setting, instead of silently becoming the default.
func TestMalformedSettingsStopTheProgram(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_BOOT_ALLOW_PLAIN_SECRETS=yes", "ANVIL_BOOT_PREPARE_WORKERS=many"}, nil,
		`ANVIL_BOOT_ALLOW_PLAIN_SECRETS="yes"`, `ANVIL_BOOT_PREPARE_WORKERS="many"`)
}
