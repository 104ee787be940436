package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// RegistryEffectTypes are the rollout events the registry hears about.
var RegistryEffectTypes = []string{"rollout.machine_done", "rollout.step_failed", "rollout.machine_released"}

// RegistryEffectMachine is a registry effect's ordering key: the machine
// it is about ("" for other events).
func RegistryEffectMachine(env *events.Envelope, payload any) string {
	switch e := deref(payload).(type) {
	case rollout.MachineDone:
		return env.Org + "." + e.Machine
	case rollout.StepFailed:
		return env.Org + "." + e.Machine
	case rollout.MachineReleased:
		return env.Org + "." + e.Machine
	}
	return ""
}

// ApplyRegistryEffect tells the registry what a rollout event means for
// the machine: done → ready at the revision; a failed step → failed with
// the reason; released by an abort → ready at the revision it still runs.
// Every registry command here is idempotent, so a redelivered event
// changes nothing twice. A refusal (the machine was deleted or moved on)
// is final and logged, not retried.
func (a *App) ApplyRegistryEffect(ctx context.Context, env *events.Envelope, payload any) error {
	var uuid string
	var cmds []any
	switch e := deref(payload).(type) {
	case rollout.MachineDone:
		rev, ok := a.rolloutRevision(ctx, env)
		if !ok {
			return errs.Unavailable("rollout %s is not in the read model yet", env.AggregateID)
		}
		uuid, cmds = e.Machine, []any{regapi.MarkReady{Revision: rev}}
	case rollout.StepFailed:
		uuid, cmds = e.Machine, []any{regapi.MarkFailed{Reason: "rollout " + env.AggregateID + ": " + string(e.Step) + ": " + e.Reason, Step: string(e.Step)}}
	case rollout.MachineReleased:
		var runs uint64 // the revision the machine still runs
		known := a.Rollouts.Peek(env.Org, env.AggregateID, func(s *rollout.State) {
			if m, ok := s.Machine(e.Machine); ok {
				runs = m.CurrentRevision
			}
		})
		if !known {
			return errs.Unavailable("rollout %s is not in the read model yet", env.AggregateID)
		}
		if runs == 0 {
			return nil // it never ran a revision of the pool: nothing to go back to
		}
		uuid, cmds = e.Machine, []any{regapi.SetTargetRevision{Revision: runs}, regapi.MarkReady{Revision: runs}}
	default:
		return nil
	}
	for _, c := range cmds {
		if _, err := a.Registry.Command(ctx, env.Org, uuid, c); err != nil {
			if permanent(err) {
				a.Log.WarnContext(ctx, "the registry refused a rollout's update", "org", env.Org, "machine", uuid,
					"rollout", env.AggregateID, "event", env.Type, "err", err)
				return nil
			}
			return err
		}
	}
	if _, ok := deref(payload).(rollout.MachineDone); ok {
		var provisioned provisionedBy
		a.Rollouts.Peek(env.Org, env.AggregateID, func(s *rollout.State) {
			if s.Provisioning {
				provisioned = provisionedBy{id: s.ID, pool: s.Pool, revision: s.Revision}
			}
		})
		if provisioned.id != "" {
			return a.catchUp(ctx, env, provisioned, uuid)
		}
	}
	return nil
}

func (a *App) rolloutRevision(ctx context.Context, env *events.Envelope) (uint64, bool) {
	if err := a.Rollouts.WaitFor(ctx, env.Sequence); err != nil {
		return 0, false
	}
	var rev uint64
	ok := a.Rollouts.Peek(env.Org, env.AggregateID, func(s *rollout.State) { rev = s.Revision })
	return rev, ok
}

// deref turns a decoded *T payload into T.
func deref(p any) any {
	switch e := p.(type) {
	case *rollout.MachineDone:
		return *e
	case *rollout.StepFailed:
		return *e
	case *rollout.MachineReleased:
		return *e
	case *regapi.DeletionStarted:
		return *e
	case *regapi.ForceUnassigned:
		return *e
	case *regapi.Deleted:
		return *e
	}
	return p
}
