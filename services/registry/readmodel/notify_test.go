package readmodel

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// The model tells its listener of every change of a machine's answer, and
// of nothing that leaves the answers as they were.
func TestNotifyHearsEveryChangeOfAnAnswer(t *testing.T) {
	m := New()
	var heard []Change
	m.Notify(func(c Change) { heard = append(heard, c) })
	id := "4c4c4544-0042-3510-8052-b4c04f4e3132"
	upper := "4C4C4544-0042-3510-8052-B4C04F4E3132"
	m.Apply(1, "acme", upper, base, machine.Registered{UUID: id, MAC: "52:54:00:00:00:01", EnrollmentTokenID: "aaaaaaaaaaaaaaaa", BootedAt: base})
	m.Apply(1, "acme", id, base, &machine.AssignedToPool{Pool: "p1"}) // redelivered: ignored
	m.Apply(2, "acme", id, base.Add(time.Second), &machine.AssignedToPool{Pool: "p1"})
	m.Apply(3, "", "", base, nil) // skipped: only the checkpoint moves
	m.SetLastSeen("acme", id, base.Add(2*time.Second))
	m.SetLastSeen("acme", id, base.Add(time.Second)) // older: ignored
	m.SetLastSeen("acme", "4c4c4544-0042-3510-8052-000000000000", base)
	m.SetIPXEBoot("acme", id, base.Add(3*time.Second), time.Time{})
	m.SetIPXEBoot("acme", id, base.Add(2*time.Second), time.Time{}) // older: ignored
	want := []Change{
		{Org: "acme", UUID: id, Seq: 1},
		{Org: "acme", UUID: id, Seq: 2},
		{Org: "acme", UUID: id, SeenOnly: true},
		{Org: "acme", UUID: id},
	}
	if !slices.Equal(heard, want) {
		t.Fatalf("heard %+v\nwant  %+v", heard, want)
	}
}

// A projection's listener keeps hearing the model that a Restore or Reset
// puts in place of the old one, and hears of the swap.
func TestProjectionNotifiesAcrossSwaps(t *testing.T) {
	src, _ := twoOrgs(t)
	var buf bytes.Buffer
	if _, err := (&MachineProjection{model: src}).Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	p := NewMachineProjection()
	var changes, swaps int
	p.Notify(func(Change) { changes++ }, func() { swaps++ })
	if _, err := p.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	page, err := p.Model().List("acme", Filter{Limit: 1})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("no machine restored: %v", err)
	}
	p.Model().SetLastSeen("acme", page.Items[0].UUID, base.Add(time.Hour))
	p.Reset()
	p.Model().Apply(1, "acme", "4c4c4544-0042-3510-8052-b4c04f4e3132", base,
		machine.Registered{UUID: "4c4c4544-0042-3510-8052-b4c04f4e3132", MAC: "52:54:00:00:00:01", EnrollmentTokenID: "aaaaaaaaaaaaaaaa", BootedAt: base})
	if swaps != 2 || changes != 2 {
		t.Fatalf("heard %d swaps and %d changes, want 2 and 2", swaps, changes)
	}
}
