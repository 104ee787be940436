package app

import "context"

// ListRevisions lists a pool's revisions.
type ListRevisions struct {
	Org, Pool  string
	MinVersion uint64
}

// ListRevisions reads the pool from the read model; its revisions
// are in the record, oldest first.
func (a *App) ListRevisions(ctx context.Context, q ListRevisions) (PoolRecord, error) {
	if err := ids(q.Org, "pool", q.Pool); err != nil {
		return PoolRecord{}, err
	}
	return a.livePool(ctx, q.Org, q.Pool, q.MinVersion)
}
