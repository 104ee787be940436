package adapters

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

func leasesFor(t *testing.T, env *eventstest.Env, instance string, ttl time.Duration) *Leases {
	t.Helper()
	l, err := NewLeases(context.Background(), env.JS, instance, ttl, 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A lease is held as long as its holder renews it, past its TTL; others
// cannot take it meanwhile, and take it at once when it is released.
func TestLeaseHeldWhileRenewed(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	const ttl = time.Second
	a, b := leasesFor(t, env, "a", ttl), leasesFor(t, env, "b", ttl)
	ctx := context.Background()
	lost, release, ok, err := a.Acquire(ctx, "acme.r-1")
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if _, _, ok, err := b.Acquire(ctx, "acme.r-1"); err != nil || ok {
			t.Fatalf("another holder took a renewed lease: %v %v", ok, err)
		}
		select {
		case <-lost:
			t.Fatal("a renewed lease was lost")
		case <-time.After(ttl / 4): // lets renewals happen; the assertions are about ownership, not timing
		}
	}
	release()
	if _, rel, ok, err := b.Acquire(ctx, "acme.r-1"); err != nil || !ok {
		t.Fatalf("a released lease could not be taken: %v %v", ok, err)
	} else {
		rel()
	}
}

// A renewal that finds the entry written by another holder loses the
// lease; one that finds its own later write (an answer lost on the way)
// keeps it.
func TestLeaseRenewalAfterOtherWrites(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	const ttl = time.Minute
	a := leasesFor(t, env, "a", ttl)
	ctx := context.Background()
	if _, _, ok, err := a.Acquire(ctx, "acme.r-2"); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	e, err := a.kv.Get(ctx, "acme.r-2")
	if err != nil {
		t.Fatal(err)
	}
	// Its own write landed but its answer was lost: the entry is at a
	// later revision with its own name.
	later, err := a.kv.Update(ctx, "acme.r-2", []byte("a"), e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	rev, err := a.renew(ctx, "acme.r-2", e.Revision(), time.Second)
	if err != nil || rev <= later {
		t.Fatalf("renewal over its own later write: rev %d (after %d), %v", rev, later, err)
	}
	// Another holder wrote it.
	if _, err := a.kv.Update(ctx, "acme.r-2", []byte("b"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := a.renew(ctx, "acme.r-2", rev, time.Second); err != errLeaseTaken {
		t.Fatalf("renewal over another holder's write: %v, want errLeaseTaken", err)
	}
	// Expired (deleted) entries are taken too.
	if err := a.kv.Purge(ctx, "acme.r-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.renew(ctx, "acme.r-2", rev, time.Second); err != errLeaseTaken {
		t.Fatalf("renewal of a purged entry: %v, want errLeaseTaken", err)
	}
}
