package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// GetRevision reads one revision of a pool.
type GetRevision struct {
	Org, Pool  string
	Revision   int
	MinVersion uint64
}

// RevisionView is a revision and the pool it belongs to.
type RevisionView struct {
	Pool     PoolRecord
	Revision pool.Revision
}

// GetRevision reads the read model.
func (a *App) GetRevision(ctx context.Context, q GetRevision) (RevisionView, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	checkName(&f, "pool", q.Pool)
	if q.Revision < 1 {
		f.Add("revision", "must be a revision number (1 or more)")
	}
	if err := f.Err(); err != nil {
		return RevisionView{}, err
	}
	if err := a.waitFor(ctx, q.MinVersion); err != nil {
		return RevisionView{}, err
	}
	rec, rev, err := a.poolRevision(ctx, q.Org, q.Pool, q.Revision)
	if err != nil {
		return RevisionView{}, err
	}
	return RevisionView{Pool: rec, Revision: rev}, nil
}
