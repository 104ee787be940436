package app

import (
	"context"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
)

// Agent is an authenticated agent: its machine, the machine revision its
// credential was minted for, and the machine's boot record as read.
type Agent struct {
	Org, UUID string
	// CredentialRevision is the machine revision of the credential.
	CredentialRevision string
	Record             record.Record
}

// Authenticate checks the bearer credential of an agent API request for
// machine pathUUID. The credential must be signed for this very UUID (a
// credential copied to another machine is refused), for a machine revision
// that was served to this machine, and that revision must still be the one
// it was served last or its current or target revision (see
// record.CredentialCurrent): credentials rotate with revisions. It must
// not have been issued before the machine's credentials were revoked (the
// machine was deleted, unassigned or registered again since; see
// record.Revocation). The credential never appears in a log or an error.
func (a *App) Authenticate(ctx context.Context, pathUUID, authorization string) (Agent, error) {
	uuid, err := ipxe.ParseUUID(pathUUID)
	if err != nil || uuid != pathUUID {
		return Agent{}, a.authFailed(ctx, "bad_uuid", errs.Invalid("uuid", "must be the machine's UUID in lowercase canonical form"))
	}
	scheme, cred, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return Agent{}, a.authFailed(ctx, "missing", errs.Unauthorized("an agent credential is required (Authorization: Bearer <ANVIL_AGENT_CREDENTIAL>)"))
	}
	c, err := a.Keys.VerifyCredential(strings.TrimSpace(cred), uuid)
	if err != nil {
		return Agent{}, a.authFailed(ctx, signing.ReasonOf(err), errs.Unauthorized("%v", err), "uuid", uuid)
	}
	rec, err := a.Records.Get(ctx, c.Org, uuid)
	if err != nil {
		return Agent{}, asUnavailable(err, "the boot records")
	}
	if rec.CredentialRevoked(c.Issued) {
		reason := "revoked"
		if c.Legacy() {
			reason = "revoked_legacy"
		}
		return Agent{}, a.authFailed(ctx, reason, errs.Unauthorized("%s", revokedDetail("the agent credential", rec.Revoked)),
			"org", c.Org, "uuid", uuid, "cause", string(rec.Revoked.Cause))
	}
	ok, need := rec.CredentialCurrent(c.MachineRevisionID, nil)
	if need {
		m, err := a.Registry.GetMachine(ctx, c.Org, uuid)
		switch {
		case errs.Is(err, errs.KindNotFound):
			return Agent{}, a.authFailed(ctx, "machine_gone", errs.NotFound("machine %s does not exist in organization %s", uuid, c.Org), "org", c.Org, "uuid", uuid)
		case err != nil:
			return Agent{}, asUnavailable(err, "the registry")
		}
		ok, _ = rec.CredentialCurrent(c.MachineRevisionID, &record.Machine{Pool: m.Pool, CurrentRevision: m.CurrentRevision, TargetRevision: m.TargetRevision})
	}
	if !ok {
		return Agent{}, a.authFailed(ctx, "rotated", errs.Unauthorized(
			"the agent credential belongs to machine revision %s, which this machine no longer runs; credentials rotate with every revision",
			c.MachineRevisionID), "org", c.Org, "uuid", uuid)
	}
	return Agent{Org: c.Org, UUID: uuid, CredentialRevision: c.MachineRevisionID, Record: rec}, nil
}

func (a *App) authFailed(ctx context.Context, reason string, err error, attrs ...any) error {
	agentAuthFailures.WithLabelValues(reason).Inc()
	attrs = append(attrs, "reason", reason, "detail", err.Error())
	a.Log.WarnContext(ctx, "agent credential refused", attrs...)
	return err
}
