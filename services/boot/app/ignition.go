package app

import (
	"context"
	"fmt"
	"net/url"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
)

// Ignition answers GET /ignition?uuid&token, which Flatcar's Ignition calls
// from the initramfs. It checks the per-boot token (it binds the
// organization, the UUID, the pool and the pool revision, and expires),
// that it was not revoked (the machine was deleted, unassigned or
// registered again since it was issued) and that it still fits the
// machine (its pool, and its target or current revision); renders the
// machine revision (through the cache), swaps the credential placeholder
// for a new agent credential, remembers which machine revision it served
// (the agent reports it by id) and records the Ignition run in the
// registry (afterwards, with LastIgnitions).
//
// Refusals are errors of errs' kinds; the HTTP port turns them into
// statuses that Ignition handles sensibly (see docs/boot.md): a refused
// token is 403 and a machine that cannot be rendered 409 (Ignition retries
// both, so fixing the machine's settings lets it go on), a dependency that
// is down 503.
func (a *App) Ignition(ctx context.Context, rawQuery string) ([]byte, error) {
	if len(rawQuery) > ipxe.MaxQueryLen {
		return nil, a.ignitionRefused(ctx, "bad_request", errs.Invalid("query", "is longer than %d bytes", ipxe.MaxQueryLen))
	}
	v, err := url.ParseQuery(rawQuery)
	if err != nil || len(v["uuid"]) > 1 || len(v["token"]) > 1 {
		return nil, a.ignitionRefused(ctx, "bad_request", errs.Invalid("query", "is malformed or repeats a parameter"))
	}
	uuid, err := ipxe.ParseUUID(v.Get("uuid"))
	if err != nil {
		return nil, a.ignitionRefused(ctx, "bad_request", errs.Invalid("uuid", "%v", err))
	}
	now := a.Now()
	claims, err := a.Keys.VerifyBoot(v.Get("token"), uuid, now)
	if err != nil {
		reason := signing.ReasonOf(err)
		if v.Get("token") == "" {
			reason = "missing"
		}
		return nil, a.ignitionRefused(ctx, "token_"+reason, errs.Forbidden("%v", err), "uuid", uuid)
	}
	rec, err := a.Records.Get(ctx, claims.Org, uuid)
	if err != nil {
		return nil, a.ignitionRefused(ctx, "records_unavailable", asUnavailable(err, "the boot records"), "org", claims.Org, "uuid", uuid, "err", err)
	}
	if rec.CredentialRevoked(claims.Issued) {
		return nil, a.ignitionRefused(ctx, "token_revoked", errs.Forbidden("%s", revokedDetail("the per-boot token", rec.Revoked)),
			"org", claims.Org, "uuid", uuid, "cause", string(rec.Revoked.Cause))
	}
	m, err := a.Registry.GetMachine(ctx, claims.Org, uuid)
	if reason, _ := stale(m, claims); err != nil || reason != "" {
		// /ipxe may have answered from memory what changed since: the
		// next boot asks the registry.
		a.forgetKnown(claims.Org, uuid)
	}
	switch {
	case errs.Is(err, errs.KindNotFound):
		return nil, a.ignitionRefused(ctx, "machine_gone", errs.Forbidden("machine %s no longer exists in organization %s", uuid, claims.Org), "org", claims.Org, "uuid", uuid)
	case err != nil:
		return nil, a.ignitionRefused(ctx, "registry_unavailable", asUnavailable(err, "the registry"), "org", claims.Org, "uuid", uuid, "err", err)
	}
	if reason, detail := stale(m, claims); reason != "" {
		return nil, a.ignitionRefused(ctx, reason, errs.Forbidden("%s", detail), "org", claims.Org, "uuid", uuid)
	}
	r, err := a.Renderer.Ignition(ctx, IgnitionRequest{
		Org: claims.Org, Pool: claims.Pool, Revision: claims.Revision, Hostname: hostname(m), Labels: m.Labels,
	})
	if err != nil {
		switch errs.KindOf(err) {
		case errs.KindValidation, errs.KindNotFound, errs.KindConflict:
			return nil, a.ignitionRefused(ctx, "render_refused",
				errs.Conflict("revision %d of pool %s cannot be rendered for machine %s: %v", claims.Revision, claims.Pool, uuid, err),
				"org", claims.Org, "uuid", uuid)
		}
		return nil, a.ignitionRefused(ctx, "revisions_unavailable", asUnavailable(err, "the revisions service"), "org", claims.Org, "uuid", uuid, "err", err)
	}
	out, err := revapi.InjectCredential(r.Ignition, a.Keys.SignCredential(claims.Org, uuid, r.MachineRevisionID, now))
	if err != nil {
		return nil, a.ignitionRefused(ctx, "internal", errs.Internal("injecting the agent credential: %v", err), "org", claims.Org, "uuid", uuid)
	}

	// The agent will report this machine revision by id, and authenticate
	// with a credential bound to it: without this entry neither works, so
	// it is not optional.
	served := record.Served{MachineRevisionID: r.MachineRevisionID, Pool: claims.Pool, Revision: claims.Revision, At: now}
	if _, err = a.update(ctx, rec, func(r *record.Record) (bool, error) { return r.ObserveIgnition(served), nil }); err != nil {
		return nil, a.ignitionRefused(ctx, "records_unavailable", asUnavailable(err, "the boot records"), "org", claims.Org, "uuid", uuid, "err", err)
	}
	// The timestamp is best effort: a machine is not kept from booting
	// because its Last Ignition could not be written, nor waits for it
	// (LastIgnitions records it afterwards).
	if a.LastIgnitions != nil {
		a.LastIgnitions.Queue(claims.Org, uuid, now)
	} else if err := a.Registry.Command(ctx, claims.Org, uuid, regapi.RecordIgnition{At: now}); err != nil {
		recordFailures.WithLabelValues("last_ignition").Inc()
		a.Log.WarnContext(ctx, "Last Ignition not recorded", "org", claims.Org, "uuid", uuid, "err", err)
	}
	ignitionServed.Inc()
	observeIPXEToIgnition(claims.Issued, now)
	a.Log.InfoContext(ctx, "Ignition served", "org", claims.Org, "uuid", uuid, "pool", claims.Pool,
		"revision", claims.Revision, "machine_revision", r.MachineRevisionID)
	return out, nil
}

// stale says why a per-boot token no longer fits its machine ("" if it
// does): the token names the pool and revision the machine was to boot
// when /ipxe issued it, and the machine has moved on since (left the pool,
// moved to another one, is being deleted, or was targeted with another
// revision than the one it runs). The machine is told to boot again: /ipxe
// issues a token for what it is to boot now.
func stale(m regapi.Machine, c signing.BootClaims) (reason, detail string) {
	const again = "; boot the machine again to get a token for what it is to boot now"
	switch {
	case m.Pool != c.Pool:
		now := "it is in no pool now"
		if m.Pool != "" {
			now = "it is in pool " + m.Pool + " now"
		}
		return "pool_changed", fmt.Sprintf("the per-boot token was issued for pool %s, but %s", c.Pool, now) + again
	case waitReason(m) != "":
		return "machine_waiting", fmt.Sprintf("machine %s boots nothing now (status %s): %s", m.UUID, m.Status, waitReason(m)) + again
	case c.Revision != m.TargetRevision && c.Revision != m.CurrentRevision:
		return "revision_changed", fmt.Sprintf("the per-boot token was issued for revision %d of pool %s, but the machine's target revision is %d and its current revision %d",
			c.Revision, c.Pool, m.TargetRevision, m.CurrentRevision) + again
	}
	return "", ""
}

func (a *App) forgetKnown(org, uuid string) {
	if a.Known != nil {
		a.Known.Forget(org, uuid, 0)
	}
}

func (a *App) ignitionRefused(ctx context.Context, reason string, err error, attrs ...any) error {
	ignitionRefusals.WithLabelValues(reason).Inc()
	attrs = append(attrs, "reason", reason, "detail", err.Error())
	a.Log.WarnContext(ctx, "Ignition refused", attrs...)
	return err
}

// asUnavailable keeps an unavailable error as it is and turns anything
// else (an internal error of a dependency) into one, since retrying is the
// only thing the machine can do.
func asUnavailable(err error, what string) error {
	if unavailable(err) {
		return err
	}
	return errs.Unavailable("%s failed: %v", what, err)
}
