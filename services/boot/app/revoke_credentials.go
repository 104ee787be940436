package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

var credentialRevocations = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_boot_credential_revocations_total",
	Help: "Machines whose agent credentials and per-boot tokens were revoked, by cause: deleted, unassigned, force_unassigned, registered_again. A redelivered event is not counted again.",
}, []string{"cause"})

func init() {
	for _, c := range record.Causes() {
		credentialRevocations.WithLabelValues(string(c))
	}
}

// RevokingEvents are the registry's machine events after which what a
// machine was issued must stop working: its life ended (deleted), its life
// in a pool ended (unassigned, force-unassigned), or a new life began
// (registered, after a deletion).
func RevokingEvents() []any {
	return []any{regapi.Deleted{}, regapi.Unassigned{}, regapi.ForceUnassigned{}, regapi.Registered{}}
}

// RevocationOf says what a revoking event revokes: the cause, and the
// bound (credentials issued before it are refused). at is the event's
// time. ok is false for any other payload.
//
// An ending revokes everything issued up to and including the millisecond
// of the event. A registration revokes what was issued before the boot
// that registered the machine: that boot's per-boot token is issued at
// the very time the boot service gave the registry (Registered.BootedAt,
// its own clock), so it is the first thing the new life holds.
func RevocationOf(payload any, at time.Time) (cause record.Cause, before time.Time, ok bool) {
	end := at.Truncate(time.Millisecond).Add(time.Millisecond)
	switch p := payload.(type) {
	case regapi.Deleted:
		return record.CauseDeleted, end, true
	case regapi.Unassigned:
		return record.CauseUnassigned, end, true
	case regapi.ForceUnassigned:
		return record.CauseForceUnassigned, end, true
	case regapi.Registered:
		if p.BootedAt.IsZero() {
			return record.CauseRegistered, at, true
		}
		return record.CauseRegistered, p.BootedAt, true
	}
	return "", time.Time{}, false
}

// RevokeCredentials handles a revoking machine event (see RevokingEvents):
// it records in the machine's boot record that the credentials and
// per-boot tokens issued before then are revoked, which the agent API and
// /ignition check. It is idempotent: a redelivered event changes nothing.
// A malformed event is a validation error (it can never succeed).
func (a *App) RevokeCredentials(ctx context.Context, org, id string, seq uint64, at time.Time, payload any) error {
	cause, before, ok := RevocationOf(payload, at)
	if !ok {
		return nil
	}
	var f errs.Fields
	checkOrg(&f, org)
	uuid, err := ipxe.ParseUUID(id)
	if err != nil {
		f.Add("uuid", "%v", err)
	}
	if err := f.Err(); err != nil {
		return err
	}
	changed := false
	if _, err := a.Records.Update(ctx, org, uuid, func(r *record.Record) (bool, error) {
		changed = r.Revoke(before, cause, seq)
		return changed, nil
	}); err != nil {
		return asUnavailable(err, "the boot records")
	}
	if changed {
		credentialRevocations.WithLabelValues(string(cause)).Inc()
		a.Log.InfoContext(ctx, "machine credentials revoked", "org", org, "uuid", uuid, "cause", string(cause),
			"issued_before", before.UTC().Format(time.RFC3339Nano), "seq", seq)
	}
	return nil
}

// revokedDetail explains a refusal of something issued before rv.Before.
func revokedDetail(what string, rv *record.Revocation) string {
	return what + " was revoked: " + rv.Cause.Explain() + ", and what was issued to it before " +
		rv.Before.UTC().Format("2006-01-02T15:04:05.000Z07:00") + " no longer works; the machine gets a new one when it boots again"
}
