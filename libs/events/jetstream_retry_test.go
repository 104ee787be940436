package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// TestUncheckableRetryIsNotAConflict: a retried append whose version check
// fails, where the store cannot look up whether the first attempt stored
// the event (the lookup's consumer cannot be created, as while a cluster
// elects a meta leader), must not be reported as a lost race. A conflict
// makes the caller decide anew on top of an event it may have stored
// itself (and answer 409/412 for a command that took effect); the caller
// must instead retry the same events, which then succeed.
func TestUncheckableRetryIsNotAConflict(t *testing.T) {
	srv, err := server.NewServer(&server.Options{
		JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, NoLog: true,
		Users: []*server.User{
			{Username: "writer", Password: "w"},
			{Username: "blind", Password: "b", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{">"},
					// The store reads through ephemeral consumers; this client
					// can append and see the stream, but not read events.
					Deny: []string{"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>"}},
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	open := func(user, pass string) *events.JetStreamStore {
		nc, err := nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(user, pass),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the expected permission violation
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := events.NewJetStreamStore(context.Background(), js, testRegistry(), events.StreamOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	writer, blind := open("writer", "w"), open("blind", "b")

	ctx := context.Background()
	ref := events.AggregateRef{Org: "acme", Type: "machine", ID: "m1"}
	draft := events.Draft{ID: "0190a4a0-0000-7000-8000-000000000001", Payload: counted{N: 1}}
	first, err := writer.Append(ctx, ref, 0, draft)
	if err != nil {
		t.Fatal(err)
	}

	retries := map[string]func(context.Context) error{
		"Append": func(ctx context.Context) error { _, err := blind.Append(ctx, ref, 0, draft); return err },
		"AppendMany": func(ctx context.Context) error {
			return blind.AppendMany(ctx, []events.AppendRequest{{Ref: ref, Expected: 0, Drafts: []events.Draft{draft}}})[0].Err
		},
	}
	for name, retry := range retries {
		// The lookup waits for an answer that never comes; the deadline ends it.
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = retry(bctx)
		cancel()
		var conflict *events.ConflictError
		switch {
		case err == nil:
			t.Fatalf("%s: retry whose landing could not be checked answered success", name)
		case errors.As(err, &conflict) || errs.Is(err, errs.KindConflict):
			t.Fatalf("%s: retry whose landing could not be checked answered a conflict: %v", name, err)
		case !strings.Contains(err.Error(), draft.ID):
			t.Errorf("%s: error %q does not name the event", name, err)
		}
	}

	again, err := writer.Append(ctx, ref, 0, draft)
	if err != nil || again[0].Sequence != first[0].Sequence {
		t.Fatalf("retry: %v at %v, want success at %d", err, again, first[0].Sequence)
	}
	all, err := writer.Load(ctx, ref)
	if err != nil || len(all) != 1 {
		t.Fatalf("stored %d times (%v), want once", len(all), err)
	}
}
