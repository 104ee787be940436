package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

// orgCommand runs one organization command.
func (a *App) orgCommand(ctx context.Context, orgID string, expected uint64, cmd org.Command) (org.State, []events.Envelope, uint64, error) {
	var f errs.Fields
	validOrg(&f, orgID)
	if err := f.Err(); err != nil {
		return org.State{}, nil, 0, err
	}
	now := a.Now()
	return decideAndAppend(ctx, a.Store, events.AggregateRef{Org: orgID, Type: orgType, ID: orgID}, expected, nil, foldOrg,
		func(s org.State) ([]any, error) { return org.Decide(s, cmd, now) },
		func(s org.State, evs []any) org.State {
			s.Tokens = cloneTokens(s.Tokens)
			for _, e := range evs {
				s.Apply(e)
			}
			return s
		}, nil)
}

// CreateOrg creates an organization; creating an existing one is a conflict.
func (a *App) CreateOrg(ctx context.Context, r api.OrgCreate) (api.Org, error) {
	s, stored, version, err := a.orgCommand(ctx, r.ID, 0, org.Create{ID: r.ID, DisplayName: r.DisplayName})
	if err != nil {
		return api.Org{}, errs.As(rename(err, "id"))
	}
	if len(stored) == 0 {
		return api.Org{}, errs.Conflict("organization %q already exists", r.ID)
	}
	return api.Org{ID: s.ID, DisplayName: s.DisplayName, Version: version}, nil
}

// RenameOrg changes the display name.
func (a *App) RenameOrg(ctx context.Context, r api.OrgRename) (api.Org, error) {
	if _, err := a.Orgs.Get(r.Org); err != nil {
		return api.Org{}, err
	}
	s, _, version, err := a.orgCommand(ctx, r.Org, r.ExpectedVersion, org.Rename{DisplayName: r.DisplayName})
	if err != nil {
		return api.Org{}, err
	}
	return api.Org{ID: s.ID, DisplayName: s.DisplayName, Version: version}, nil
}

// rename moves field errors about "org" to the field the request used.
func rename(err error, field string) error {
	e := errs.As(err)
	if e == nil || e.Kind != errs.KindValidation {
		return err
	}
	out := *e
	out.Fields = make([]errs.FieldError, len(e.Fields))
	for i, fe := range e.Fields {
		if fe.Field == "org" {
			fe.Field = field
		}
		out.Fields[i] = fe
	}
	return &out
}

func foldOrg(envs []events.Envelope) (org.State, error) {
	var s org.State
	for i := range envs {
		p, err := registry.Decode(&envs[i])
		if err != nil {
			return s, errs.Internal("organization history does not decode at %d: %v", envs[i].Sequence, err)
		}
		s.Apply(p)
	}
	return s, nil
}

func cloneTokens(m map[string]org.Token) map[string]org.Token {
	if m == nil {
		return nil
	}
	out := make(map[string]org.Token, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
