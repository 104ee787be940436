package app

import (
	"context"
	"errors"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// PlatformActor is the actor of the events the platform appends by itself.
const PlatformActor = pool.PlatformActor

// PlanPlatformRevisionsEventTypes are the events PlanPlatformRevisions
// reacts to.
func PlanPlatformRevisionsEventTypes() []string {
	return []string{catalog.VersionAdded{}.EventType()}
}

// PlanPlatformRevisions plans and decides the platform revisions for one
// added version. It reacts to catalog.version_added: for every pool of
// every organization on the added version's minor and older than its
// newest patch, it creates a platform-made revision. It is pending
// (not applied) unless the pool auto-applies platform revisions: then the
// same append requests its rollout, by "platform", once the boot service
// is known to serve its files; the rollout service holds it until the
// pool's maintenance window opens. Pools whose control plane is older
// than the patch are held back and logged.
//
// It is idempotent: each pool's decision is made on the pool's state as
// loaded from the log, and a pool already at (or past) the version gets
// nothing, so a redelivered event changes nothing (the revision and its
// apply are one append).
func (a *App) PlanPlatformRevisions(ctx context.Context, env *events.Envelope, payload any) error {
	added, ok := payload.(catalog.VersionAdded)
	if !ok || env.Ref() != CatalogRef {
		return nil
	}
	v, err := catalog.ParseVersion(added.Version)
	if err != nil {
		a.Log.ErrorContext(ctx, "catalog.version_added with an unparsable version; ignored", "seq", env.Sequence, "err", err)
		return nil
	}
	// The pools must be read as of (at least) this event.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = a.Projection.WaitFor(wctx, env.Sequence)
	cancel()
	if err != nil {
		return errs.Unavailable("the read model has not reached sequence %d: %v", env.Sequence, err)
	}
	cat := a.Model.Catalog().State.Catalog.With(v)
	ctx = events.WithActor(ctx, PlatformActor)

	var failed []error
	for _, org := range a.Model.Orgs() {
		recs := a.Model.Pools(org, "")
		pools := make([]*pool.Pool, len(recs))
		for i := range recs {
			pools[i] = &recs[i].State
		}
		controlPlanes := map[string]catalog.Version{}
		for _, c := range a.Model.Clusters(org) {
			controlPlanes[c.State.Name] = c.State.KubernetesVersion
		}
		plan := pool.PlanPatch(cat, v, pools, controlPlanes, a.Now())
		for _, held := range plan.Held {
			a.Log.InfoContext(ctx, "platform revision held back", "org", org, "pool", held.Pool, "version", v.String(), "reason", held.Reason)
		}
		for _, c := range plan.Commands {
			_, payloads, err := execute[PoolRecord](ctx, a, poolRef(org, c.Pool), 0,
				func(ctx context.Context, r *PoolRecord) ([]any, error) {
					if !live(&r.State) {
						return nil, nil
					}
					cl, err := a.loadCluster(ctx, org, r.State.Cluster)
					if err != nil {
						return nil, err
					}
					return a.decidePlatformRevision(ctx, &r.State, c.Command, pool.Env{Catalog: cat, Cluster: &cl.State})
				})
			switch {
			case err == nil && len(payloads) > 0:
				rc := payloads[0].(pool.RevisionCreated)
				attrs := []any{"org", org, "pool", c.Pool, "revision", rc.Revision.Number, "kubernetes_version", c.Command.KubernetesVersion}
				if ar, ok := applyOf(payloads); ok {
					a.Log.InfoContext(ctx, "platform revision created and applied", append(attrs, "rollout", ar.RolloutID)...)
				} else {
					a.Log.InfoContext(ctx, "platform revision created", attrs...)
				}
			case err == nil:
			case errs.Is(err, errs.KindConflict), errs.Is(err, errs.KindNotFound), errs.Is(err, errs.KindValidation):
				// The pool moved on (another minor, deleted, its control
				// plane changed): nothing to do for it, now or on a retry.
				a.Log.InfoContext(ctx, "platform revision not created", "org", org, "pool", c.Pool, "reason", err.Error())
			default:
				failed = append(failed, err)
			}
		}
	}
	return errors.Join(failed...)
}

// decidePlatformRevision decides one pool's platform revision. An apply
// that the pool's auto-apply adds goes out only for a revision the boot
// service can serve the files of: if it cannot say (unavailable) nothing
// is appended and the event is retried; if it lacks them the revision is
// made pending, and its message says why it was not applied.
func (a *App) decidePlatformRevision(ctx context.Context, p *pool.Pool, cmd pool.CreatePlatformRevision, env pool.Env) ([]any, error) {
	payloads, err := p.CreatePlatformRevision(cmd, env)
	if _, applies := applyOf(payloads); err != nil || !applies {
		return payloads, err
	}
	err = a.checkAssets(ctx, p, payloads)
	switch {
	case err == nil:
		return payloads, nil
	case errs.Is(err, errs.KindUnavailable):
		return nil, err
	}
	cmd.ApplyHeld = "the boot service cannot serve its files (" + err.Error() + ")"
	return p.CreatePlatformRevision(cmd, env)
}

// applyOf returns the apply among payloads, if any.
func applyOf(payloads []any) (pool.ApplyRequested, bool) {
	for _, pl := range payloads {
		if ar, ok := pl.(pool.ApplyRequested); ok {
			return ar, true
		}
	}
	return pool.ApplyRequested{}, false
}
