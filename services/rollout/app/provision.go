package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// ProvisionTriggers are the registry events after which a machine may be
// pending in a pool: registered with a pool it was pre-registered with,
// or assigned to one.
var ProvisionTriggers = []string{"machine.registered", "machine.assigned_to_pool"}

// ProvisionIDFor is the id of the provisioning rollout a registry event
// starts: deterministic, so that a redelivered event finds it.
func ProvisionIDFor(eventID string) string { return RolloutIDFor("provision\x00" + eventID) }

// StartProvisioning provisions a machine that became pending in a pool:
// a one-machine rollout of the pool's applied revision, without cordon or
// drain (it never joined). This is how a machine "takes over the
// configuration prepared for it" as soon as it boots, with no rollout
// started by hand. A pool that was never applied has nothing to provision
// yet: its first apply's rollout includes the machine. Save (without
// apply) changes nothing for it either: it gets the applied revision.
// Maintenance windows do not hold a provisioning: a machine that never
// joined carries no workload to disrupt.
func (a *App) StartProvisioning(ctx context.Context, env *events.Envelope, _ any) error {
	org, uuid := env.Org, env.AggregateID
	// The machine as of the event: a projection read could lag behind it.
	m, err := a.Registry.MachineAt(ctx, org, uuid, env.Sequence)
	if err != nil {
		if permanent(err) {
			return nil
		}
		return err
	}
	if m.Status != regapi.StatusPending || m.Pool == "" {
		return nil // not waiting for a first revision (no pool, or pre-registered and not booted yet)
	}
	log := a.Log.With("org", org, "machine", uuid, "pool", m.Pool, "cause", env.Type)
	by := ""
	a.Rollouts.PeekActive(func(rOrg string, s *rollout.State) bool {
		if rOrg == org && s.Pool == m.Pool {
			if _, ok := s.Machine(uuid); ok {
				by = s.ID
			}
		}
		return by == ""
	})
	if by != "" {
		log.InfoContext(ctx, "machine is provisioned by a rollout already", "rollout", by)
		return nil
	}
	// The pool as the machine found it: if it had no applied revision
	// then, the pool's first apply (later in the log) rolls out to the
	// machine, which was pending by then.
	then, err := a.Revisions.PoolAt(ctx, org, m.Pool, env.Sequence)
	switch {
	case err != nil && permanent(err):
		log.InfoContext(ctx, "machine waits for its pool to be created and applied (Save & Apply) to be provisioned")
		return nil
	case err != nil:
		return err
	case then.AppliedRevision == 0:
		log.InfoContext(ctx, "machine waits for its pool's first apply (Save & Apply) to be provisioned")
		return nil
	}
	p, err := a.Revisions.Pool(ctx, org, m.Pool)
	if err != nil {
		if permanent(err) {
			log.WarnContext(ctx, "machine cannot be provisioned: its pool cannot be read", "err", err)
			return nil
		}
		return err
	}
	if p.Deleted {
		log.WarnContext(ctx, "machine cannot be provisioned: its pool is deleted")
		return nil
	}
	rev, err := a.Revisions.Revision(ctx, org, m.Pool, p.AppliedRevision)
	if err != nil {
		return err
	}
	strategy, err := poolStrategy(p.Spec.Rollout)
	if err != nil {
		return err
	}
	strategy.MaintenanceWindows = nil
	_, err = a.Start(ctx, StartRollout{
		ID: ProvisionIDFor(env.ID), Org: org, Pool: m.Pool, Cluster: p.Cluster, Revision: uint64(p.AppliedRevision),
		Hash: rev.Hash, Machine: uuid, Strategy: strategy,
		RequestedBy: "machine:" + uuid + " (provisioning, " + env.Type + ")", Provisioning: true,
	})
	if errs.KindOf(err) == errs.KindValidation {
		// The registry's pool listing has not caught up with the event
		// yet (the machine "is not in the pool"): try again.
		return errs.Unavailable("provisioning machine %s: %v", uuid, err)
	}
	if err == nil {
		log.InfoContext(ctx, "machine provisions itself", "rollout", ProvisionIDFor(env.ID), "revision", p.AppliedRevision)
	}
	return err
}

// CatchUpIDFor is the id of the rollout that brings a provisioned machine
// to its pool's newer applied revision.
func CatchUpIDFor(eventID string) string { return RolloutIDFor("catch-up\x00" + eventID) }

// provisionedBy is what catchUp reads of the provisioning rollout.
type provisionedBy struct {
	id, pool string
	revision uint64
}

// catchUp runs after a provisioning rollout brought a machine to its
// revision: if the pool was applied again meanwhile (that apply's rollout
// left the machine out while it was provisioning), a one-machine rollout
// of the newly applied revision follows, as any rollout of a joined
// machine does (cordon, drain, reboot, in the pool's windows).
func (a *App) catchUp(ctx context.Context, env *events.Envelope, by provisionedBy, uuid string) error {
	p, err := a.Revisions.Pool(ctx, env.Org, by.pool)
	if err != nil {
		if permanent(err) {
			return nil
		}
		return err
	}
	if p.Deleted || p.AppliedRevision == 0 || uint64(p.AppliedRevision) == by.revision {
		return nil
	}
	rev, err := a.Revisions.Revision(ctx, env.Org, by.pool, p.AppliedRevision)
	if err != nil {
		return err
	}
	strategy, err := poolStrategy(p.Spec.Rollout)
	if err != nil {
		return err
	}
	id := CatchUpIDFor(env.ID)
	_, err = a.Start(ctx, StartRollout{
		ID: id, Org: env.Org, Pool: by.pool, Cluster: p.Cluster, Revision: uint64(p.AppliedRevision),
		Hash: rev.Hash, Rollback: uint64(p.AppliedRevision) < by.revision, Machine: uuid, Strategy: strategy,
		RequestedBy: "machine:" + uuid + " (catching up with the pool's applied revision after provisioning " + by.id + ")",
	})
	if err == nil {
		a.Log.InfoContext(ctx, "provisioned machine catches up with its pool's applied revision", "org", env.Org,
			"machine", uuid, "rollout", id, "revision", p.AppliedRevision)
	}
	return err
}
