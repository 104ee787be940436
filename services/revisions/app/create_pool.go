package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// CreatePool creates a pool with its first revision ("Save"), and with
// Apply also requests it for rollout ("Save & Apply").
type CreatePool struct {
	Org, Name, Cluster string
	Spec               pool.Spec
	Message            string
	Apply              bool
}

// CreatePool resolves the Kubernetes minor against the catalog and
// the cluster's control plane (both read from the log).
func (a *App) CreatePool(ctx context.Context, cmd CreatePool) (PoolOutcome, error) {
	author, err := actor(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	create := pool.Create{
		Name: cmd.Name, Cluster: cmd.Cluster, Spec: cmd.Spec,
		Author: author, Message: cmd.Message, Apply: cmd.Apply, At: a.Now(),
	}
	var f errs.Fields
	checkOrg(&f, cmd.Org)
	if len(f) > 0 || check.DNSLabel(cmd.Name) != nil || check.DNSLabel(cmd.Cluster) != nil {
		var none pool.Pool
		_, err := none.Create(create, pool.Env{})
		validationOnly(&f, err)
		return PoolOutcome{}, f.Err()
	}
	cat, err := a.loadCatalog(ctx)
	if err != nil {
		return PoolOutcome{}, err
	}
	cl, err := a.loadCluster(ctx, cmd.Org, cmd.Cluster)
	if err != nil {
		return PoolOutcome{}, err
	}
	env := pool.Env{Catalog: cat.State.Catalog, Cluster: &cl.State}
	rec, payloads, err := execute[PoolRecord](ctx, a, poolRef(cmd.Org, cmd.Name), 0,
		func(ctx context.Context, r *PoolRecord) ([]any, error) {
			payloads, err := r.State.Create(create, env)
			if err != nil {
				return nil, err
			}
			return payloads, a.checkAssets(ctx, &r.State, payloads)
		})
	if err != nil {
		return PoolOutcome{}, err
	}
	return outcome(rec, payloads), nil
}
