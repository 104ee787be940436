// Package ports exposes the rollout service on NATS: the request/reply
// subjects of services/rollout/api and the event handlers.
package ports

import (
	"context"
	"errors"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Register serves api.Subjects on srv.
func Register(srv *command.Server, a *app.App) error {
	control := func(subject string, mk func(r api.ControlRequest) rollout.Command) error {
		return command.Handle(srv, subject, func(ctx context.Context, r api.ControlRequest) (api.Rollout, error) {
			if err := app.CheckControl(r.Org, r.ID, r.Reason); err != nil {
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
			if err := app.CheckStart(r.Org, r.Machine, r.After, r.ID); err != nil {
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
			if err := app.CheckRef(r.Org, r.ID); err != nil {
				return api.Rollout{}, err
			}
			return get(ctx, a, r.Org, r.ID, r.At, r.MinVersion)
		}),
		command.Handle(srv, api.SubjectList, func(ctx context.Context, r api.ListRequest) (api.RolloutList, error) {
			if err := app.CheckOrg(r.Org); err != nil {
				return api.RolloutList{}, err
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
	// RegistryEffectsInParallel is how many machines' registry effects
	// are applied at once (each machine's in the order of the log).
	RegistryEffectsInParallel = 16
	MachineOpHandler          = "rollout-machine-operations"
	ProvisionHandler          = "rollout-provision"
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
	// Each machine's effects in order, several machines at once: every
	// machine of a rollout is an event of the rollout's one subject.
	r.Handle(RegistryEffectHandler, events.Filter{AggregateType: app.AggregateType, EventTypes: app.RegistryEffectTypes},
		a.ApplyRegistryEffect, handler.InParallel(RegistryEffectsInParallel, app.RegistryEffectMachine))
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
