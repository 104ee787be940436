package app

import (
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// TestStaleTokens: a per-boot token fits its machine only while the
// machine is in the token's pool, boots something, and has the token's
// revision as its target or current revision.
func TestStaleTokens(t *testing.T) {
	tok := signing.BootClaims{Org: "acme", UUID: "u", Pool: "workers", Revision: 2}
	m := func(status regapi.Status, pool string, current, target uint64) regapi.Machine {
		return regapi.Machine{Org: "acme", UUID: "u", Status: status, Pool: pool, CurrentRevision: current, TargetRevision: target}
	}
	for _, tc := range []struct {
		name   string
		m      regapi.Machine
		reason string
	}{
		{"target", m(regapi.StatusProvisioning, "workers", 0, 2), ""},
		{"current, moving on", m(regapi.StatusReconfiguring, "workers", 2, 3), ""},
		{"maintenance", m(regapi.StatusMaintenance, "workers", 2, 2), ""},
		{"being unassigned", m(regapi.StatusUnassigning, "workers", 2, 2), ""},
		{"no pool", m(regapi.StatusReadyUnassigned, "", 2, 0), "pool_changed"},
		{"another pool", m(regapi.StatusProvisioning, "gpus", 0, 2), "pool_changed"},
		{"being deleted", m(regapi.StatusDeleting, "workers", 2, 2), "machine_waiting"},
		{"not targeted", m(regapi.StatusPending, "workers", 2, 0), "machine_waiting"},
		{"older revision", m(regapi.StatusReconfiguring, "workers", 3, 4), "revision_changed"},
		{"retargeted before it booted", m(regapi.StatusProvisioning, "workers", 0, 3), "revision_changed"},
	} {
		reason, detail := stale(tc.m, tok)
		if reason != tc.reason || (reason != "") != (detail != "") {
			t.Errorf("%s: %q %q, want reason %q", tc.name, reason, detail, tc.reason)
		}
	}
}

// TestRevocationOf: which registry events revoke, and from when.
func TestRevocationOf(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)
	booted := at.Add(-2 * time.Millisecond)
	for _, tc := range []struct {
		payload any
		cause   record.Cause
		before  time.Time
	}{
		{regapi.Deleted{Policy: regapi.DeletionForced}, record.CauseDeleted, at.Truncate(time.Millisecond).Add(time.Millisecond)},
		{regapi.Unassigned{Pool: "workers"}, record.CauseUnassigned, at.Truncate(time.Millisecond).Add(time.Millisecond)},
		{regapi.ForceUnassigned{Pool: "workers"}, record.CauseForceUnassigned, at.Truncate(time.Millisecond).Add(time.Millisecond)},
		{regapi.Registered{BootedAt: booted}, record.CauseRegistered, booted},
	} {
		cause, before, ok := RevocationOf(tc.payload, at)
		if !ok || cause != tc.cause || !before.Equal(tc.before) {
			t.Errorf("%T: %s %s %v, want %s %s", tc.payload, cause, before, ok, tc.cause, tc.before)
		}
	}
	for _, p := range []any{regapi.UnassignStarted{}, regapi.DeletionStarted{}, regapi.AssignedToPool{}, regapi.Preregistered{}} {
		if _, _, ok := RevocationOf(p, at); ok {
			t.Errorf("%T revokes", p)
		}
	}
}
