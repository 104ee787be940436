package natsserver_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/natsserver"
)

// The server logs through the logger it is given: its notices at debug
// level, so that an operator's info log is not the server's banner.
func TestServerLogsThroughSlog(t *testing.T) {
	for _, tc := range []struct {
		level  slog.Level
		notice bool
	}{{slog.LevelDebug, true}, {slog.LevelInfo, false}} {
		var buf eventstest.SyncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
		srv, err := natsserver.Start(natsserver.Options{DataDir: t.TempDir(), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		out := buf.String()
		if got := strings.Contains(out, "component=nats-server") && strings.Contains(out, "Starting nats-server"); got != tc.notice {
			t.Errorf("at level %v, the server's start-up notice logged: %v\n%s", tc.level, got, out)
		}
	}
}
