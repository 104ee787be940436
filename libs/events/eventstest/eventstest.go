// Package eventstest starts a real embedded JetStream for tests of any
// service: a fresh server in a temporary directory, stopped at cleanup. It
// also holds the generic pieces the services' test harnesses share: a
// log buffer safe for concurrent writes (SyncBuffer), a service runner
// that waits for readiness and stops at cleanup (RunService), a polling
// wait (Eventually) and a worker pool for benchmarks (Parallel).
package eventstest

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/natsserver"
)

// Env is one test's JetStream: server, connection and event store.
type Env struct {
	Server *natsserver.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
	Store  *events.JetStreamStore
	Dir    string
}

// Start runs an embedded server for t and opens a store with reg.
func Start(t testing.TB, reg *events.Registry) *Env {
	t.Helper()
	return StartIn(t, t.TempDir(), reg)
}

// StartIn is Start on a given data directory, so a test can restart a
// server on the same data.
func StartIn(t testing.TB, dir string, reg *events.Registry) *Env {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Options{DataDir: dir, Logger: serverLogger()})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		t.Fatalf("connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := events.NewJetStreamStore(context.Background(), js, reg, events.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Server: srv, Conn: nc, JS: js, Store: store, Dir: dir}
	t.Cleanup(e.Stop)
	return e
}

// Stop closes the connection and shuts the server down; safe to call twice.
func (e *Env) Stop() {
	if e.Conn != nil {
		e.Conn.Close()
		e.Conn = nil
	}
	if e.Server != nil {
		e.Server.Shutdown()
		e.Server = nil
	}
}

// serverLogger sends the embedded server's warnings and errors to stderr
// when ANVIL_TEST_NATS_LOG is set (its value a level: warn, info, debug),
// for a test or benchmark whose services stall on JetStream.
func serverLogger() *slog.Logger {
	v := os.Getenv("ANVIL_TEST_NATS_LOG")
	if v == "" {
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(v)); err != nil {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
