package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

// GetOrg reads an organization, now or as of At.
func (a *App) GetOrg(ctx context.Context, r api.OrgRef) (api.Org, error) {
	var f errs.Fields
	validOrg(&f, r.Org)
	if err := f.Err(); err != nil {
		return api.Org{}, err
	}
	if r.At == "" {
		v, err := a.Orgs.Get(r.Org)
		if err != nil {
			return api.Org{}, err
		}
		return api.Org{ID: v.State.ID, DisplayName: v.State.DisplayName, Version: v.Version}, nil
	}
	at, err := events.ParseAt(r.At)
	if err != nil {
		return api.Org{}, err
	}
	var s org.State
	var version uint64
	err = a.Store.Replay(ctx, events.Filter{Org: r.Org, AggregateType: orgType, AggregateID: r.Org}, events.Position{}, at,
		func(e *events.Envelope) error {
			p, err := registry.Decode(e)
			if err == nil {
				s.Apply(p)
				version = e.Sequence
			}
			return err
		})
	if err != nil {
		return api.Org{}, err
	}
	if !s.Exists() {
		return api.Org{}, errs.NotFound("organization %q did not exist at %s", r.Org, r.At)
	}
	return api.Org{ID: s.ID, DisplayName: s.DisplayName, Version: version}, nil
}

// ListOrgs lists every organization (the bootstrap admin's view; the
// gateway filters it for everyone else).
func (a *App) ListOrgs(context.Context, struct{}) (api.OrgList, error) {
	out := api.OrgList{Items: []api.Org{}}
	for _, v := range a.Orgs.List() {
		out.Items = append(out.Items, api.Org{ID: v.State.ID, DisplayName: v.State.DisplayName, Version: v.Version})
	}
	return out, nil
}
