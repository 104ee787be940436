package readmodel

import (
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

func TestRolloutsModel(t *testing.T) {
	m := NewRollouts()
	var changes []string
	m.OnChange = func(org, id string, created, active bool) {
		if created {
			changes = append(changes, "created "+id)
		}
	}
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	started := rollout.Started{ID: "ro-1", Pool: "p", Revision: 2, PoolSize: 1,
		Machines: []rollout.Machine{{UUID: "00000000-0000-4000-8000-000000000001", Hostname: "m1"}},
		Strategy: rollout.Strategy{}.WithDefaults(), At: at}
	apply := func(seq uint64, org string, p any) {
		t.Helper()
		if err := m.Apply(&events.Envelope{Org: org, AggregateType: "rollout", AggregateID: "ro-1", Sequence: seq, Time: at}, p); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, "acme", started)
	apply(2, "other", started) // the same id in another organization is another rollout
	apply(3, "acme", rollout.Paused{By: "op", At: at})
	if m.Checkpoint() != 3 || len(changes) != 2 {
		t.Fatalf("checkpoint %d, changes %v", m.Checkpoint(), changes)
	}
	v, ok := m.View("acme", "ro-1", true)
	if !ok || v.Version != 3 || v.View.Status != rollout.StatusPaused || len(v.View.Log) != 2 || v.LogLength != 2 {
		t.Fatalf("view %+v", v)
	}
	if o, _ := m.View("other", "ro-1", false); o.View.Status != rollout.StatusPending || o.View.Log != nil {
		t.Fatalf("other org's view %+v", o)
	}
	s, ok := m.Log("acme", "ro-1", 1, 10)
	if !ok || len(s.Entries) != 1 || s.Next != 2 || s.Final {
		t.Fatalf("log page %+v", s)
	}
	if s, _ := m.Log("acme", "ro-1", 99, 10); len(s.Entries) != 0 || s.Next != 2 {
		t.Fatalf("log page past the end %+v", s)
	}
	if len(m.Active()) != 2 || len(m.List("acme")) != 1 {
		t.Fatalf("active %d, list %d", len(m.Active()), len(m.List("acme")))
	}
	if _, ok := m.Get("nobody", "ro-1"); ok {
		t.Fatal("a rollout of another organization is visible")
	}
	// Peek reads the state the view folded, as Get's copy shows it.
	var rev uint64
	var host string
	if !m.Peek("acme", "ro-1", func(s *rollout.State) {
		rev = s.Revision
		if ms, ok := s.Machine("00000000-0000-4000-8000-000000000001"); ok {
			host = ms.Hostname
		}
	}) || rev != 2 || host != "m1" {
		t.Fatalf("peek: revision %d, machine %q", rev, host)
	}
	if m.Peek("nobody", "ro-1", func(*rollout.State) { t.Error("peeked at another organization's rollout") }) {
		t.Fatal("peek found a rollout of another organization")
	}
	var peeked []string
	m.PeekActive(func(org string, s *rollout.State) bool { peeked = append(peeked, org+"/"+s.ID); return true })
	if len(peeked) != 2 || peeked[0] != "acme/ro-1" || peeked[1] != "other/ro-1" {
		t.Fatalf("peeked at %v, want both active rollouts, oldest first", peeked)
	}
	peeked = nil
	m.PeekActive(func(org string, s *rollout.State) bool { peeked = append(peeked, org); return false })
	if len(peeked) != 1 {
		t.Fatalf("peeked at %v after fn said stop", peeked)
	}
	m.Skip(9)
	if m.Checkpoint() != 9 {
		t.Fatal("skip did not move the checkpoint")
	}
	m.Reset()
	if m.Checkpoint() != 0 || len(m.Active()) != 0 {
		t.Fatal("reset left state behind")
	}
}
