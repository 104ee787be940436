package adapters

import (
	"context"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// UpdateFrom writes from the record it is given while nothing changed it
// since it was read, and decides again on the stored record when another
// update came in between, so that no update is lost.
func TestRecordsUpdateFrom(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx := context.Background()
	recs, err := NewRecords(ctx, env.JS, 1, DefaultRecordCacheEntries)
	if err != nil {
		t.Fatal(err)
	}
	const org, uuid = "acme", "6f1e3b9a-0c2d-4e5f-8a7b-1c2d3e4f5a6b"
	set := func(booted string) func(*record.Record) (bool, error) {
		return func(r *record.Record) (bool, error) {
			if r.BootedRevision == booted {
				return false, nil
			}
			r.BootedRevision = booted
			return true, nil
		}
	}

	missing, err := recs.Get(ctx, org, uuid)
	if err != nil || missing.Revision != 0 {
		t.Fatalf("Get of a machine without a record: %+v, %v; want revision 0", missing, err)
	}
	created, err := recs.UpdateFrom(ctx, missing, set("mr-1"))
	if err != nil || created.Revision == 0 || created.BootedRevision != "mr-1" {
		t.Fatalf("UpdateFrom a missing record: %+v, %v; want it created", created, err)
	}
	read, err := recs.Get(ctx, org, uuid)
	if err != nil || read.Revision != created.Revision {
		t.Fatalf("Get after the write: revision %d, %v; the write answered %d", read.Revision, err, created.Revision)
	}

	// Another replica writes after read was taken.
	if _, err := recs.Update(ctx, org, uuid, func(r *record.Record) (bool, error) {
		r.ReportedRevision = 7
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	var seen []record.Record
	stored, err := recs.UpdateFrom(ctx, read, func(r *record.Record) (bool, error) {
		seen = append(seen, *r)
		return set("mr-2")(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].ReportedRevision != 0 || seen[1].ReportedRevision != 7 {
		t.Fatalf("fn saw %+v; want the stale copy first, then the stored record with the other write", seen)
	}
	final, err := recs.Get(ctx, org, uuid)
	if err != nil || final.BootedRevision != "mr-2" || final.ReportedRevision != 7 || final.Revision != stored.Revision {
		t.Fatalf("record after both writes: %+v, %v; want both changes at revision %d", final, err, stored.Revision)
	}

	// Unchanged: nothing is written, and the record is answered as read.
	same, err := recs.UpdateFrom(ctx, final, set("mr-2"))
	if err != nil || same.Revision != final.Revision {
		t.Fatalf("UpdateFrom changing nothing: %+v, %v; want the record as read", same, err)
	}
	if read.BootedRevision != "mr-1" {
		t.Fatalf("UpdateFrom changed the caller's copy: %+v", read)
	}
}
