package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/diff"
)

// DiffRevisions compares any two revisions of a pool.
type DiffRevisions struct {
	Org, Pool string
	From, To  int
}

// DiffRevisions renders both revisions as the preview machine (see
// PreviewIgnition) and diffs config and Ignition.
func (a *App) DiffRevisions(ctx context.Context, q DiffRevisions) (diff.Diff, error) {
	var f errs.Fields
	checkOrg(&f, q.Org)
	checkName(&f, "pool", q.Pool)
	if q.From < 1 {
		f.Add("from", "must be a revision number (1 or more)")
	}
	if q.To < 1 {
		f.Add("to", "must be a revision number (1 or more)")
	}
	if err := f.Err(); err != nil {
		return diff.Diff{}, err
	}
	// Revisions are numbered 1..n, so the pool has both if it has the
	// higher one.
	rec, _, err := a.poolRevision(ctx, q.Org, q.Pool, max(q.From, q.To))
	if err != nil {
		return diff.Diff{}, err
	}
	from, err := rec.State.Revision(q.From)
	if err != nil {
		return diff.Diff{}, err
	}
	to, err := rec.State.Revision(q.To)
	if err != nil {
		return diff.Diff{}, err
	}
	before, err := a.preview(ctx, q.Org, &rec, from)
	if err != nil {
		return diff.Diff{}, err
	}
	after, err := a.preview(ctx, q.Org, &rec, to)
	if err != nil {
		return diff.Diff{}, err
	}
	return diff.Revisions(from, to, before.Ignition, after.Ignition)
}
