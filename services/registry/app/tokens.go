package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// IssueToken creates an API or enrollment token. The plaintext is in the
// reply only; the event and the projection keep its hash.
func (a *App) IssueToken(ctx context.Context, r api.TokenIssue) (api.TokenIssued, error) {
	kind := token.Kind(r.Kind)
	plaintext, id, hash, err := token.Generate(kind, a.Rand)
	if err != nil {
		return api.TokenIssued{}, err
	}
	var cmd org.Command
	switch kind {
	case token.KindAPI:
		if r.MaxMachines != 0 {
			return api.TokenIssued{}, errs.Invalid("max_machines", "only enrollment tokens register machines")
		}
		cmd = org.IssueAPIToken{TokenID: id, Hash: hash, Name: r.Name, Role: org.Role(r.Role), ExpiresAt: r.ExpiresAt}
	default:
		if r.Role != "" {
			return api.TokenIssued{}, errs.Invalid("role", "only API tokens have a role")
		}
		cmd = org.IssueEnrollmentToken{TokenID: id, Hash: hash, Name: r.Name, ExpiresAt: r.ExpiresAt, MaxMachines: r.MaxMachines}
	}
	res, err := a.orgCommand(ctx, r.Org, 0, cmd)
	if err != nil {
		return api.TokenIssued{}, err
	}
	for _, info := range res.State.ListTokens(kind, a.Now()) {
		if info.ID == id {
			return api.TokenIssued{Token: plaintext, Info: wire.TokenInfo(a.withUsage(ctx, r.Org, info))}, nil
		}
	}
	return api.TokenIssued{}, errs.Internal("issued token %s is missing from its organization", id)
}

// ListTokens lists an organization's tokens without hashes.
func (a *App) ListTokens(ctx context.Context, r api.TokenListReq) (api.TokenList, error) {
	v, err := a.Orgs.Get(r.Org)
	if err != nil {
		return api.TokenList{}, err
	}
	out := api.TokenList{Items: []api.TokenInfo{}}
	for _, k := range []token.Kind{token.KindAPI, token.KindEnrollment} {
		if r.Kind == "" || token.Kind(r.Kind) == k {
			for _, info := range v.State.ListTokens(k, a.Now()) {
				out.Items = append(out.Items, wire.TokenInfo(a.withUsage(ctx, r.Org, info)))
			}
		}
	}
	return out, nil
}

// RevokeToken revokes one token of the organization.
func (a *App) RevokeToken(ctx context.Context, r api.TokenRevoke) (api.TokenInfo, error) {
	if _, err := a.Orgs.Get(r.Org); err != nil {
		return api.TokenInfo{}, err
	}
	res, err := a.orgCommand(ctx, r.Org, 0, org.RevokeToken{TokenID: r.TokenID})
	if err != nil {
		return api.TokenInfo{}, err
	}
	stored, _ := res.State.Token(r.TokenID)
	for _, info := range res.State.ListTokens(stored.Kind, a.Now()) {
		if info.ID == r.TokenID {
			return wire.TokenInfo(a.withUsage(ctx, r.Org, info)), nil
		}
	}
	return api.TokenInfo{}, errs.NotFound("token %q does not exist", r.TokenID)
}

// VerifyToken checks a presented token against the projection. Every
// refusal reads the same to the caller (unauthorized), so a guesser learns
// nothing; the reason is for logs.
func (a *App) VerifyToken(_ context.Context, r api.TokenVerify) (api.Principal, error) {
	kind, id, _, err := token.Parse(r.Token)
	if err != nil {
		return api.Principal{}, errs.Unauthorized("the token is malformed")
	}
	if r.Kind != "" && kind != token.Kind(r.Kind) {
		return api.Principal{}, errs.Unauthorized("a %s token was presented where a %s token is required", kind, r.Kind)
	}
	v, ok := a.Orgs.ByToken(id)
	if !ok {
		return api.Principal{}, errs.Unauthorized("the token is not valid")
	}
	stored, ok := v.State.Token(id)
	if !ok {
		return api.Principal{}, errs.Unauthorized("the token is not valid")
	}
	if err := token.Verify(stored, r.Token, a.Now()); err != nil {
		return api.Principal{}, errs.Unauthorized("the token is not valid (%s)", token.ReasonOf(err))
	}
	t := v.State.Tokens[id]
	return api.Principal{Org: v.State.ID, TokenID: id, Name: t.Name, Kind: api.TokenKind(kind), Role: api.Role(t.Role)}, nil
}

// withUsage adds how many machines an enrollment token has registered
// (left out when it cannot be read).
func (a *App) withUsage(ctx context.Context, orgID string, info org.TokenInfo) org.TokenInfo {
	if info.Kind != token.KindEnrollment || a.Enrollment == nil {
		return info
	}
	if n, err := a.Enrollment.Registered(ctx, orgID, info.ID, a.registeredWith(orgID, info.ID)); err == nil {
		info.RegisteredMachines = &n
	}
	return info
}
