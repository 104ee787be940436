// Package ports exposes the rollout service on NATS: the request/reply
// subjects of services/rollout/api and the event handlers.
package ports

import (
	"context"
	"errors"
	"regexp"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/fields"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

var (
	idRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// checkOrg validates the organization a request names with the rule
// every service shares (fields.OrgID, the registry's organization id).
func checkOrg(f *errs.Fields, org string) {
	if err := fields.OrgID(org); err != nil {
		f.Add("org", "%v", err)
	}
}

func checkRef(f *errs.Fields, org, id string) {
	checkOrg(f, org)
	if !idRE.MatchString(id) {
		f.Add("id", "must be 1-128 letters, digits, '-' or '_'")
	}
}

// Register serves api.Subjects on srv.
func Register(srv *command.Server, a *app.App) error {
	control := func(subject string, mk func(r api.ControlRequest) rollout.Command) error {
		return command.Handle(srv, subject, func(ctx context.Context, r api.ControlRequest) (api.Rollout, error) {
			var f errs.Fields
			checkRef(&f, r.Org, r.ID)
			if len(r.Reason) > 1024 {
				f.Add("reason", "must be at most 1024 characters")
			}
			if err := f.Err(); err != nil {
				return api.Rollout{}, err
			}
			if r.By == "" {
				r.By = events.Actor(ctx)
			}
			v, err := a.Control(ctx, r.Org, r.ID, r.ExpectedVersion, mk(r))
			if err != nil {
				return api.Rollout{}, err
			}
			return get(ctx, a, r.Org, r.ID, "", v)
		})
	}
	return errors.Join(
		command.Handle(srv, api.SubjectStart, func(ctx context.Context, r api.StartRequest) (api.Rollout, error) {
			var f errs.Fields
			checkOrg(&f, r.Org)
			if r.Machine != "" && !uuidRE.MatchString(r.Machine) {
				f.Add("machine", "must be a lowercase canonical SMBIOS UUID")
			}
			if r.After != "" && !idRE.MatchString(r.After) {
				f.Add("after", "must be a rollout id")
			}
			if r.ID != "" && !idRE.MatchString(r.ID) {
				f.Add("id", "must be 1-128 letters, digits, '-' or '_'")
			}
			if err := f.Err(); err != nil {
				return api.Rollout{}, err
			}
			if r.RequestedBy == "" {
				r.RequestedBy = events.Actor(ctx)
			}
			id, v, err := a.StartRequested(ctx, r.Org, r.Pool, r.Revision, r.Machine, r.After, r.ID, r.RequestedBy)
			if err != nil {
				return api.Rollout{}, err
			}
			return get(ctx, a, r.Org, id, "", v)
		}),
		command.Handle(srv, api.SubjectGet, func(ctx context.Context, r api.GetRequest) (api.Rollout, error) {
			var f errs.Fields
			checkRef(&f, r.Org, r.ID)
			if err := f.Err(); err != nil {
				return api.Rollout{}, err
			}
			return get(ctx, a, r.Org, r.ID, r.At, r.MinVersion)
		}),
		command.Handle(srv, api.SubjectList, func(ctx context.Context, r api.ListRequest) (api.RolloutList, error) {
			if err := fields.OrgID(r.Org); err != nil {
				return api.RolloutList{}, errs.Invalid("org", "%v", err)
			}
			vs, next, err := a.ListRollouts(r.Org, app.ListFilter{Pool: r.Pool, Status: r.Status, Cursor: r.Cursor, Limit: r.Limit})
			if err != nil {
				return api.RolloutList{}, err
			}
			out := api.RolloutList{Items: make([]api.Rollout, 0, len(vs)), Next: next}
			for _, v := range vs {
				out.Items = append(out.Items, toAPI(v))
			}
			return out, nil
		}),
		control(api.SubjectPause, func(r api.ControlRequest) rollout.Command { return rollout.Pause{By: r.By, Reason: r.Reason} }),
		control(api.SubjectResume, func(r api.ControlRequest) rollout.Command { return rollout.Resume{By: r.By, Reason: r.Reason} }),
		control(api.SubjectAbort, func(r api.ControlRequest) rollout.Command { return rollout.Abort{By: r.By, Reason: r.Reason} }),
		control(api.SubjectRetry, func(r api.ControlRequest) rollout.Command { return rollout.Retry{By: r.By, Reason: r.Reason} }),
		registerOperations(srv, a),
	)
}

func get(ctx context.Context, a *app.App, org, id, at string, minVersion uint64) (api.Rollout, error) {
	v, err := a.GetRollout(ctx, org, id, at, minVersion, false)
	if err != nil {
		return api.Rollout{}, err
	}
	return toAPI(v), nil
}

// Handler names: the durable consumers of the rollout service's event
// handlers (handler-<name>).
const (
	StartHandler          = "rollout-start-on-apply"
	RegistryEffectHandler = "rollout-registry-effects"
	MachineOpHandler      = "rollout-machine-operations"
	ProvisionHandler      = "rollout-provision"
)

// RegisterEventHandlers starts a rollout for every pool.apply_requested
// and keeps the registry's machines in step with rollouts.
func RegisterEventHandlers(r *handler.Router, a *app.App) {
	r.Handle(StartHandler, events.Filter{AggregateType: "pool", EventTypes: []string{revapi.EventApplyRequested}},
		func(ctx context.Context, env *events.Envelope, payload any) error {
			var e revapi.ApplyRequested
			switch p := payload.(type) {
			case revapi.ApplyRequested:
				e = p
			case *revapi.ApplyRequested:
				e = *p
			default:
				return nil
			}
			err := a.StartFromApply(ctx, env, e)
			if errs.Is(err, errs.KindValidation) {
				return handler.Permanent(err)
			}
			return err
		})
	r.Handle(RegistryEffectHandler, events.Filter{AggregateType: app.AggregateType, EventTypes: app.RegistryEffectTypes},
		a.ApplyRegistryEffect)
	r.Handle(ProvisionHandler, events.Filter{AggregateType: "machine", EventTypes: app.ProvisionTriggers},
		func(ctx context.Context, env *events.Envelope, payload any) error {
			err := a.StartProvisioning(ctx, env, payload)
			if errs.Is(err, errs.KindValidation) {
				return handler.Permanent(err)
			}
			return err
		})
	r.Handle(MachineOpHandler, events.Filter{AggregateType: "machine", EventTypes: app.MachineOperationTriggers},
		func(ctx context.Context, env *events.Envelope, payload any) error {
			err := a.StartMachineOperation(ctx, env, payload)
			if errs.Is(err, errs.KindValidation) {
				return handler.Permanent(err)
			}
			return err
		})
}
