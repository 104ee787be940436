package adapters

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// A read from the store that the watch overtook, or that began before the
// watch was re-established, is not kept: the cache never holds a record
// older than a change the watch delivered.
func TestRecordCacheKeepsNoReadOlderThanTheWatch(t *testing.T) {
	const key = "acme.m1"
	rec := func(rev uint64, booted string) *record.Record {
		return &record.Record{Org: "acme", UUID: "m1", Revision: rev, BootedRevision: booted}
	}
	tests := []struct {
		name     string
		run      func(c *recordCache)
		want     bool   // a record is held
		wantBoot string // and it is this one
	}{
		{"no watch yet: nothing kept", func(c *recordCache) {
			c.end(c.begin(key), key, rec(4, "a"))
		}, false, ""},
		{"a read with the watch running is kept", func(c *recordCache) {
			c.watching(true)
			c.end(c.begin(key), key, rec(4, "a"))
		}, true, "a"},
		{"the watch delivered a newer change during the read", func(c *recordCache) {
			c.watching(true)
			tk := c.begin(key)
			c.changed(key, 5)
			c.end(tk, key, rec(4, "a"))
		}, false, ""},
		{"the change the watch delivered is the one read", func(c *recordCache) {
			c.watching(true)
			tk := c.begin(key)
			c.changed(key, 5)
			c.end(tk, key, rec(5, "b"))
		}, true, "b"},
		{"the watch restarted during the read", func(c *recordCache) {
			c.watching(true)
			tk := c.begin(key)
			c.watching(false)
			c.watching(true)
			c.end(tk, key, rec(4, "a"))
		}, false, ""},
		{"a change drops the held record", func(c *recordCache) {
			c.watching(true)
			c.end(c.begin(key), key, rec(4, "a"))
			c.changed(key, 6)
		}, false, ""},
		{"the watch's news of this replica's own write keeps it", func(c *recordCache) {
			c.watching(true)
			c.wrote(key, *rec(7, "c"))
			c.changed(key, 7)
		}, true, "c"},
		{"an older read does not replace this replica's newer write", func(c *recordCache) {
			c.watching(true)
			tk := c.begin(key)
			c.wrote(key, *rec(7, "c"))
			c.end(tk, key, rec(4, "a"))
		}, true, "c"},
		{"a failed read keeps nothing", func(c *recordCache) {
			c.watching(true)
			c.end(c.begin(key), key, nil)
		}, false, ""},
		{"the watch stopping drops everything", func(c *recordCache) {
			c.watching(true)
			c.wrote(key, *rec(7, "c"))
			c.watching(false)
		}, false, ""},
		{"a lost compare-and-swap drops the record", func(c *recordCache) {
			c.watching(true)
			c.wrote(key, *rec(7, "c"))
			c.forget(key)
		}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRecordCache(10)
			tt.run(c)
			got, ok := c.get(key)
			if ok != tt.want || got.BootedRevision != tt.wantBoot {
				t.Fatalf("held %v (booted %q); want %v (%q)", ok, got.BootedRevision, tt.want, tt.wantBoot)
			}
			if len(c.reads) != 0 {
				t.Fatalf("%d reads still noted after they ended", len(c.reads))
			}
		})
	}
}

// The cache holds at most its bound, dropping the least recently used,
// and hands out copies a caller may change.
func TestRecordCacheBoundAndCopies(t *testing.T) {
	c := newRecordCache(2)
	c.watching(true)
	for i, key := range []string{"o.a", "o.b", "o.c"} {
		c.wrote(key, record.Record{Revision: uint64(i + 1), Served: []record.Served{{MachineRevisionID: key}}})
		if key == "o.b" {
			c.get("o.a") // o.a is used again: o.b is the least recently used
		}
	}
	if _, ok := c.get("o.b"); ok || c.len() != 2 {
		t.Fatalf("held %d records, o.b among them: %v; want 2, not o.b", c.len(), ok)
	}
	r, _ := c.get("o.a")
	r.Served[0].MachineRevisionID = "changed by a caller"
	if again, _ := c.get("o.a"); again.Served[0].MachineRevisionID != "o.a" {
		t.Fatalf("a caller's change reached the cache: %q", again.Served[0].MachineRevisionID)
	}
	off := newRecordCache(0)
	off.watching(true)
	off.wrote("o.a", record.Record{Revision: 1})
	if _, ok := off.get("o.a"); ok {
		t.Fatal("a cache of size 0 held a record")
	}
}

// Two replicas on one bucket (real JetStream KV): each answers what it
// read or wrote from memory, and a change by the other reaches it through
// the watch; an update from a record the watch has not refreshed yet
// loses its compare-and-swap and decides again on the stored record.
func TestRecordsCacheFollowsTheOtherReplica(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := NewRecords(ctx, env.JS, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRecords(ctx, env.JS, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	const org, uuid = "acme", "6f1e3b9a-0c2d-4e5f-8a7b-1c2d3e4f5a6b"
	key := record.Key(org, uuid)
	setBooted := func(v string) func(*record.Record) (bool, error) {
		return func(r *record.Record) (bool, error) { r.BootedRevision = v; return true, nil }
	}
	// Before its watch runs, a replica keeps nothing.
	if _, err := a.Update(ctx, org, uuid, setBooted("mr-1")); err != nil {
		t.Fatal(err)
	}
	if n := a.cache.len(); n != 0 {
		t.Fatalf("replica a holds %d records before its watch runs; want 0", n)
	}
	for _, r := range []*Records{a, b} {
		go r.Watch(ctx, slog.Default())
	}
	eventstest.Eventually(t, "both watches established", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		for _, r := range []*Records{a, b} {
			r.cache.mu.Lock()
			live := r.cache.live
			r.cache.mu.Unlock()
			if !live {
				return false, "a watch is not established"
			}
		}
		return true, ""
	})

	// a reads from the store once, then from memory.
	first, err := a.Get(ctx, org, uuid)
	if err != nil || first.BootedRevision != "mr-1" {
		t.Fatalf("a's first read: %+v, %v", first, err)
	}
	if _, ok := a.cache.get(key); !ok {
		t.Fatal("a does not hold the record it read")
	}

	// b changes it; a sees the change once its watch delivers it.
	changed, err := b.Update(ctx, org, uuid, setBooted("mr-2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Get(ctx, org, uuid); got.BootedRevision != "mr-2" || got.Revision != changed.Revision {
		t.Fatalf("b reads %+v after its own write; want mr-2 at revision %d", got, changed.Revision)
	}
	eventstest.Eventually(t, "replica a sees b's change", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		got, err := a.Get(ctx, org, uuid)
		if err != nil {
			return false, err.Error()
		}
		return got.BootedRevision == "mr-2" && got.Revision == changed.Revision, "a reads " + got.BootedRevision
	})

	// An update from a copy older than the store loses its race and
	// applies to the stored record: b's next change is kept.
	if _, err := b.Update(ctx, org, uuid, func(r *record.Record) (bool, error) { r.ReportedRevision = 9; return true, nil }); err != nil {
		t.Fatal(err)
	}
	stored, err := a.UpdateFrom(ctx, first, setBooted("mr-3"))
	if err != nil {
		t.Fatal(err)
	}
	if stored.BootedRevision != "mr-3" || stored.ReportedRevision != 9 {
		t.Fatalf("a's update from an old copy stored %+v; want mr-3 with b's reported revision 9 kept", stored)
	}
	eventstest.Eventually(t, "replica b sees a's change", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		got, err := b.Get(ctx, org, uuid)
		if err != nil {
			return false, err.Error()
		}
		return got.Revision == stored.Revision && got.BootedRevision == "mr-3", "b reads " + got.BootedRevision
	})
}

// anvil_boot_record_reads_total counts every read where it was answered:
// with the cache off, every Get reads the bucket; with it on and the watch
// running, the second Get of a record is answered from memory.
func TestRecordReadsCounted(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const org, uuid = "acme", "6f1e3b9a-0c2d-4e5f-8a7b-1c2d3e4f5a6c"
	counts := func() (cache, store float64) {
		return testutil.ToFloat64(readsFromCache), testutil.ToFloat64(readsFromStore)
	}
	for _, tc := range []struct {
		name                 string
		entries              int
		wantCache, wantStore float64
	}{
		{name: "cache off", entries: -1, wantCache: 0, wantStore: 2},
		{name: "cache on", entries: 10, wantCache: 1, wantStore: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := NewRecords(ctx, env.JS, 1, tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			go recs.Watch(wctx, slog.Default())
			eventstest.Eventually(t, "the watch established", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
				recs.cache.mu.Lock()
				defer recs.cache.mu.Unlock()
				return recs.cache.live, "not yet"
			})
			cache0, store0 := counts()
			for range 2 {
				if _, err := recs.Get(ctx, org, uuid); err != nil {
					t.Fatal(err)
				}
			}
			cache1, store1 := counts()
			if cache1-cache0 != tc.wantCache || store1-store0 != tc.wantStore {
				t.Fatalf("two reads counted %v from the cache and %v from the store; want %v and %v",
					cache1-cache0, store1-store0, tc.wantCache, tc.wantStore)
			}
		})
	}
}
