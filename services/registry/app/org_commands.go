package app

import (
	"context"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

// orgCommand runs one organization command.
func (a *App) orgCommand(ctx context.Context, orgID string, expected uint64, cmd org.Command) (aggregate.Result[org.State], error) {
	var f errs.Fields
	validOrg(&f, orgID)
	if err := f.Err(); err != nil {
		return aggregate.Result[org.State]{}, err
	}
	return a.orgs().Execute(ctx, aggregate.Command[org.State]{Ref: events.AggregateRef{Org: orgID, Type: orgType, ID: orgID}, Expected: expected,
		Decide: func(s org.State, now time.Time) ([]any, error) { return org.Decide(s, cmd, now) }})
}

// CreateOrg creates an organization; creating an existing one is a conflict.
func (a *App) CreateOrg(ctx context.Context, r api.OrgCreate) (api.Org, error) {
	res, err := a.orgCommand(ctx, r.ID, 0, org.Create{ID: r.ID, DisplayName: r.DisplayName})
	if err != nil {
		return api.Org{}, errs.As(rename(err, "id"))
	}
	if len(res.Stored) == 0 {
		return api.Org{}, errs.Conflict("organization %q already exists", r.ID)
	}
	return api.Org{ID: res.State.ID, DisplayName: res.State.DisplayName, Version: res.Version}, nil
}

// RenameOrg changes the display name.
func (a *App) RenameOrg(ctx context.Context, r api.OrgRename) (api.Org, error) {
	if _, err := a.Orgs.Get(r.Org); err != nil {
		return api.Org{}, err
	}
	res, err := a.orgCommand(ctx, r.Org, r.ExpectedVersion, org.Rename{DisplayName: r.DisplayName})
	if err != nil {
		return api.Org{}, err
	}
	return api.Org{ID: res.State.ID, DisplayName: res.State.DisplayName, Version: res.Version}, nil
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
