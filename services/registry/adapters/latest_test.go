package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// runWriter runs fn (a Run method) until the test ends and returns a stop
// that waits for it to return.
func runWriter(t *testing.T, run func(context.Context, *slog.Logger) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, slog.Default()) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return stop
}

func kvString(kv jetstream.KeyValue, key string) string {
	e, err := kv.Get(context.Background(), key)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(e.Value())
}

// Heartbeats are handed over and written off the request path: every
// machine's newest value reaches the bucket, a key set twice before its
// write is written with its newer value, and the watch sees them.
func TestHeartbeatsAreWrittenOffTheRequestPath(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx := context.Background()
	hb, err := NewHeartbeats(ctx, env.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const machines = 3000 // more than one window of writes in flight
	for i := range machines {
		if err := hb.Record(ctx, "acme", fmt.Sprintf("m%04d", i), t0); err != nil {
			t.Fatal(err)
		}
	}
	// Set again before any write went out: only the newer value counts.
	if err := hb.Record(ctx, "acme", "m0007", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	stop := runWriter(t, hb.Run)

	seen := make(chan string, machines)
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go func() {
		_ = hb.Watch(watchCtx, slog.Default(), func(org, uuid string, at time.Time) {
			if org == "acme" && uuid == "m0007" && at.Equal(t0.Add(time.Minute)) {
				seen <- uuid
			}
		})
	}()
	eventstest.Eventually(t, "every heartbeat written", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		st, err := hb.kv.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return st.Values() == machines, fmt.Sprintf("%d values", st.Values())
	})
	if got, want := kvString(hb.kv, "acme.m0007"), t0.Add(time.Minute).Format(time.RFC3339Nano); got != want {
		t.Fatalf("m0007 = %s, want the newer heartbeat %s", got, want)
	}
	if got, want := kvString(hb.kv, "acme.m2999"), t0.Format(time.RFC3339Nano); got != want {
		t.Fatalf("m2999 = %s, want %s", got, want)
	}
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not see m0007's newer heartbeat")
	}

	// What is handed over just before a stop is written by the stop.
	if err := hb.Record(ctx, "acme", "late", t0); err != nil {
		t.Fatal(err)
	}
	stop()
	if got := kvString(hb.kv, "acme.late"); got != t0.Format(time.RFC3339Nano) {
		t.Fatalf("the heartbeat recorded before the stop = %s", got)
	}
}

// A write that fails (here: the bucket does not exist yet, so nothing
// answers its subject) waits and is tried again until it is written.
func TestLatestWriterTriesFailedWritesAgain(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx := context.Background()
	const bucket = "anvil_test_latest"
	w, err := newLatestWriter(env.JS, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Set("acme.m1", []byte("first")); err != nil {
		t.Fatal(err)
	}
	runWriter(t, w.Run)
	eventstest.Eventually(t, "the failed write counted", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, waiting := w.waiting["acme.m1"]
		failed := testutil.ToFloat64(latestWritten.WithLabelValues(bucket, "failed"))
		return waiting && failed >= 1, fmt.Sprintf("waiting %v, failed writes %v", waiting, failed)
	})
	kv, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	eventstest.Eventually(t, "the value written once the bucket exists", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		got := kvString(kv, "acme.m1")
		return got == "first", got
	})
}

// Past its bound the writer refuses new keys with an unavailable error
// (and keeps taking newer values of keys that already wait).
func TestLatestWriterRefusesPastItsBound(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	w, err := newLatestWriter(env.JS, "anvil_test_bound")
	if err != nil {
		t.Fatal(err)
	}
	w.maxWaiting = 2
	for _, k := range []string{"o.a", "o.b", "o.a"} {
		if err := w.Set(k, []byte("v")); err != nil {
			t.Fatalf("Set(%s): %v", k, err)
		}
	}
	err = w.Set("o.c", []byte("v"))
	if !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("a third key past a bound of 2: %v, want unavailable", err)
	}
	var e *errs.Error
	if !errors.As(err, &e) || e.Message == "" {
		t.Fatalf("the refusal says nothing: %#v", err)
	}
}
