package app

import (
	"context"
	"errors"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
)

// MaxAttempts bounds how often a command without an expected version is
// decided on the log after losing an optimistic-concurrency race.
const MaxAttempts = aggregate.DefaultMaxAttempts

// readWait bounds how long a query waits for the read model to reach a
// version (MinVersion, or the log's head before a cross-aggregate check).
const readWait = 5 * time.Second

// folder is a record that events fold into.
type folder interface {
	Apply(env *events.Envelope, payload any)
	CurrentVersion() uint64
}

// executor runs commands on the aggregates whose records are P, through
// the one executor every service uses (libs/events/aggregate).
func executor[R any, P interface {
	*R
	folder
}](a *App) *aggregate.Executor[P] {
	return &aggregate.Executor[P]{Store: a.Store, Registry: a.Registry, Clock: a.Now, Retry: a.Retry,
		Initial: func() P { return P(new(R)) },
		Apply: func(rec P, env *events.Envelope, payload any) P {
			rec.Apply(env, payload)
			return rec
		}}
}

// load folds every event of ref into a fresh record.
func load[R any, P interface {
	*R
	folder
}](ctx context.Context, a *App, ref events.AggregateRef) (P, error) {
	rec, _, err := executor[R, P](a).Load(ctx, ref)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// loadAt folds the events of ref up to pos (time travel).
func loadAt[R any, P interface {
	*R
	folder
}](ctx context.Context, a *App, ref events.AggregateRef, pos events.Position) (P, error) {
	rec, _, err := executor[R, P](a).LoadAt(ctx, ref, pos)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// execute runs one command on one aggregate: load, decide, append with the
// loaded version, and on a lost race decide again, unless the caller
// pinned expected (its If-Match). It returns the record with the new
// events applied and the payloads appended (none if the domain decided
// that nothing changes). decide may read other aggregates or ask another
// service with ctx: it is called again after every lost race.
func execute[R any, P interface {
	*R
	folder
}](ctx context.Context, a *App, ref events.AggregateRef, expected uint64, decide func(context.Context, P) ([]any, error)) (P, []any, error) {
	res, err := executor[R, P](a).Execute(ctx, aggregate.Command[P]{Ref: ref, Expected: expected,
		Decide: func(rec P, _ time.Time) ([]any, error) { return decide(ctx, rec) }})
	if err != nil {
		return nil, nil, err
	}
	return res.State, res.Events, nil
}

// storeErr reports a failure of the event store, keeping typed errors.
func storeErr(what string, err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errs.Unavailable("%s: %v", what, err)
	}
	return errs.Unavailable("event store: %s: %v", what, err)
}

// checkOrg validates the organization every request names with the rule
// every service shares (fields.OrgID, the registry's organization id).
func checkOrg(f *errs.Fields, org string) {
	if err := fields.OrgID(org); err != nil {
		f.Add("org", "%v", err)
	}
}

// checkName validates an aggregate id field (an RFC 1123 label).
func checkName(f *errs.Fields, field, name string) {
	if err := check.DNSLabel(name); err != nil {
		f.Add(field, "%v", err)
	}
}

// ids validates org and the named ids in one go.
func ids(org string, named ...string) error {
	var f errs.Fields
	checkOrg(&f, org)
	for i := 0; i+1 < len(named); i += 2 {
		checkName(&f, named[i], named[i+1])
	}
	return f.Err()
}

func clusterRef(org, name string) events.AggregateRef {
	return events.AggregateRef{Org: org, Type: ClusterType, ID: name}
}

func poolRef(org, name string) events.AggregateRef {
	return events.AggregateRef{Org: org, Type: PoolType, ID: name}
}

// actor is who asked, as the command bus carries it; domain commands that
// record an author use it.
func actor(ctx context.Context) (string, error) {
	a := events.Actor(ctx)
	if a == "" {
		return "", errs.Unauthorized("the command carries no actor (the %s header); anvil records who made every change", "Anvil-Actor")
	}
	return a, nil
}

// waitFor blocks until the read model has applied seq (0: no wait).
func (a *App) waitFor(ctx context.Context, seq uint64) error {
	if seq == 0 || a.Projection == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	if err := a.Projection.WaitFor(ctx, seq); err != nil {
		return errs.Unavailable("the read model has not reached version %d yet; try again", seq)
	}
	return nil
}

// catchUp waits until the read model has applied everything in the log
// now, before a decision that reads other aggregates from it (the pools of
// a cluster, say).
func (a *App) catchUp(ctx context.Context) error {
	head, err := a.Store.Head(ctx)
	if err != nil {
		return storeErr("reading the log's head", err)
	}
	return a.waitFor(ctx, head)
}

// loadCatalog reads the catalog from the log (commands decide on the
// authoritative state, not on the read model).
func (a *App) loadCatalog(ctx context.Context) (*CatalogRecord, error) {
	return load[CatalogRecord](ctx, a, CatalogRef)
}

// loadCluster reads a cluster of org from the log.
func (a *App) loadCluster(ctx context.Context, org, name string) (*ClusterRecord, error) {
	return load[ClusterRecord](ctx, a, clusterRef(org, name))
}

// validationOnly keeps err if it is a validation error: used to report
// every field at once when an id is already known to be invalid.
func validationOnly(f *errs.Fields, err error) {
	if errs.Is(err, errs.KindValidation) {
		f.Merge("", err)
	}
}

// notFound is the one answer for a missing or deleted resource.
func notFound(kind, name string) error {
	return errs.NotFound("%s %q not found", kind, name)
}
