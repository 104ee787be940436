package readmodel

import (
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// TestCounts: machines of every organization by status and connectivity,
// and per status how long the offline machine silent longest has been.
func TestCounts(t *testing.T) {
	m := New()
	reg := func(seq uint64, org, id, mac string) {
		m.Apply(seq, org, id, base, machine.Registered{UUID: id, MAC: mac, EnrollmentTokenID: "aaaaaaaaaaaaaaaa", BootedAt: base})
	}
	a, b, c := "4c4c4544-0042-3510-8052-b4c04f4e0001", "4c4c4544-0042-3510-8052-b4c04f4e0002", "4c4c4544-0042-3510-8052-b4c04f4e0003"
	reg(1, "acme", a, "52:54:00:00:00:01")
	reg(2, "acme", b, "52:54:00:00:00:02")
	reg(3, "other", c, "52:54:00:00:00:03")
	m.Apply(4, "acme", b, base, machine.AssignedToPool{Pool: "p1"})
	m.Apply(5, "acme", a, base, machine.CameOnline{LastSeenAt: base, At: base})
	m.Apply(6, "acme", b, base, machine.WentOffline{LastSeenAt: base.Add(-10 * time.Minute), At: base})
	m.Apply(7, "other", c, base, machine.WentOffline{LastSeenAt: base.Add(-time.Minute), At: base})

	got := m.Counts(base.Add(time.Hour))
	if got.ByStatus[machine.StatusReadyUnassigned] != 2 || got.ByStatus[machine.StatusPending] != 1 {
		t.Errorf("by status %v", got.ByStatus)
	}
	if got.ByConnectivity[machine.Online] != 1 || got.ByConnectivity[machine.Offline] != 2 {
		t.Errorf("by connectivity %v", got.ByConnectivity)
	}
	if d := got.LongestOffline[machine.StatusPending]; d != 70*time.Minute {
		t.Errorf("pending offline longest %s, want 1h10m", d)
	}
	if d := got.LongestOffline[machine.StatusReadyUnassigned]; d != 61*time.Minute {
		t.Errorf("ready_unassigned offline longest %s, want 1h1m", d)
	}
	// A heartbeat after it went offline counts as its last sign of life.
	m.SetLastSeen("other", c, base.Add(30*time.Minute))
	if d := m.Counts(base.Add(time.Hour)).LongestOffline[machine.StatusReadyUnassigned]; d != 30*time.Minute {
		t.Errorf("after a late heartbeat: %s, want 30m", d)
	}
}
