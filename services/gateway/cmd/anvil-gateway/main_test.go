package main

import (
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc/maintest"
)

func TestMain(m *testing.M) { maintest.Main(m, main) }

// A malformed setting stops the program with exit code 2 and names the
// setting, instead of silently becoming the default.
func TestMalformedSettingsStopTheProgram(t *testing.T) {
	maintest.ExpectRefused(t, []string{"ANVIL_GATEWAY_TOKEN_CACHE_TTL=soon", "ANVIL_CONSOLE_SESSION_TTL=12hours", "ANVIL_GATEWAY_IDEMPOTENCY_TTL=1d"}, nil,
		`ANVIL_GATEWAY_TOKEN_CACHE_TTL="soon"`, `ANVIL_CONSOLE_SESSION_TTL="12hours"`, `ANVIL_GATEWAY_IDEMPOTENCY_TTL="1d"`)
	maintest.ExpectRefused(t, []string{"ANVIL_GATEWAY_BODY_LIMIT=0"}, nil, "--body-limit (env ANVIL_GATEWAY_BODY_LIMIT) = 0")
	// A listen address without a port, and an admin hash that could never
	// match (upper case, or sha256sum's whole line), stop it too.
	maintest.ExpectRefused(t, []string{"ANVIL_GATEWAY_ADDR=garbage"}, nil, `--listen (env ANVIL_GATEWAY_ADDR) = "garbage": must be host:port`)
	maintest.ExpectRefused(t, []string{"ANVIL_ADMIN_TOKEN_HASH=" + strings.Repeat("A", 64)}, nil, "--admin-token-hash (env ANVIL_ADMIN_TOKEN_HASH): must be 64 lowercase hex digits")
	maintest.ExpectRefused(t, []string{"ANVIL_ADMIN_TOKEN_HASH=" + strings.Repeat("a", 64) + "  -"}, nil, "--admin-token-hash (env ANVIL_ADMIN_TOKEN_HASH): must be 64 lowercase hex digits")
}
