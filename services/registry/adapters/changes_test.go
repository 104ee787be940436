package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// Changes go out as numbered notices on core NATS, a machine named once per
// notice, as changed or (a heartbeat alone) as seen, with the read model's
// position; too many to name make a Reset; silence still sends a notice.
func TestMachineChangesNotices(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	sub, err := env.Conn.SubscribeSync(api.SubjectMachinesChanged)
	if err != nil {
		t.Fatal(err)
	}
	var checkpoint atomic.Uint64
	c := NewMachineChanges(env.Conn, "registry-a", checkpoint.Load, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	next := func() api.MachinesChanged {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("no notice: %v", err)
		}
		var n api.MachinesChanged
		if err := json.Unmarshal(m.Data, &n); err != nil {
			t.Fatal(err)
		}
		if n.Version != api.MachinesChangedVersion || n.Instance != "registry-a" {
			t.Fatalf("notice %+v", n)
		}
		return n
	}

	checkpoint.Store(42)
	c.Note(readmodel.Change{Org: "acme", UUID: "u1", Seq: 41})
	c.Note(readmodel.Change{Org: "acme", UUID: "u1", SeenOnly: true}) // changed already: not also seen
	c.Note(readmodel.Change{Org: "acme", UUID: "u2", SeenOnly: true})
	c.Note(readmodel.Change{Org: "globex", UUID: "u3", Seq: 42})
	n := next()
	slices.SortFunc(n.Orgs, func(a, b api.OrgMachinesChanged) int { return strings.Compare(a.Org, b.Org) })
	want := []api.OrgMachinesChanged{{Org: "acme", Changed: []string{"u1"}, Seen: []string{"u2"}}, {Org: "globex", Changed: []string{"u3"}}}
	if n.Counter != 1 || n.Position != 42 || n.Reset || fmt.Sprint(n.Orgs) != fmt.Sprint(want) {
		t.Fatalf("first notice %+v, want counter 1, position 42, %v", n, want)
	}

	// nothing to say: an empty notice after IdleNoticeInterval
	if n := next(); n.Counter != 2 || n.Reset || len(n.Orgs) != 0 || n.Position != 42 {
		t.Fatalf("idle notice %+v, want counter 2, empty, position 42", n)
	}
	c.Replaced()
	if n := next(); n.Counter != 3 || !n.Reset {
		t.Fatalf("after the model was replaced: %+v, want counter 3 and a reset", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Past maxNamedChanges machines, a notice names none and says Reset; the
// next one names again.
func TestMachineChangesTooManyToName(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	sub, err := env.Conn.SubscribeSync(api.SubjectMachinesChanged)
	if err != nil {
		t.Fatal(err)
	}
	c := NewMachineChanges(env.Conn, "registry-b", func() uint64 { return 7 }, slog.Default())
	for i := range maxNamedChanges + 1 {
		c.Note(readmodel.Change{Org: "acme", UUID: fmt.Sprint("m", i), Seq: 7})
	}
	c.send() // as Run would
	c.Note(readmodel.Change{Org: "acme", UUID: "m1", Seq: 7})
	c.send()
	// applied and noted after the checkpoint was read: the position
	// still covers it
	c.Note(readmodel.Change{Org: "acme", UUID: "m2", Seq: 9})
	c.send()
	var got []api.MachinesChanged
	for range 3 {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var n api.MachinesChanged
		if err := json.Unmarshal(m.Data, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if !got[0].Reset || len(got[0].Orgs) != 0 || got[0].Counter != 1 {
		t.Fatalf("first notice %+v, want a reset naming nothing", got[0])
	}
	if got[1].Reset || got[1].Counter != 2 || fmt.Sprint(got[1].Orgs) != fmt.Sprint([]api.OrgMachinesChanged{{Org: "acme", Changed: []string{"m1"}}}) {
		t.Fatalf("second notice %+v, want acme's m1 changed", got[1])
	}
	if got[2].Position != 9 {
		t.Fatalf("third notice %+v: position %d below the change it names (9)", got[2], got[2].Position)
	}
}
