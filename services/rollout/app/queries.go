package app

import (
	"context"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// GetRollout reads a rollout live (waiting briefly for minVersion), or as
// of at (a stream sequence or an RFC 3339 time) by replaying its events.
func (a *App) GetRollout(ctx context.Context, org, id, at string, minVersion uint64, withLog bool) (RolloutView, error) {
	if at != "" {
		return a.rolloutAt(ctx, org, id, at)
	}
	if err := a.waitVersion(ctx, minVersion); err != nil {
		return RolloutView{}, err
	}
	v, ok := a.Rollouts.View(org, id, withLog)
	if !ok {
		return v, errs.NotFound("rollout %s does not exist", id)
	}
	return v, nil
}

func (a *App) rolloutAt(ctx context.Context, org, id, at string) (RolloutView, error) {
	pos, err := events.ParseAt(at)
	if err != nil {
		return RolloutView{}, err
	}
	out := RolloutView{Org: org}
	f := events.Filter{Org: org, AggregateType: AggregateType, AggregateID: id}
	err = a.Store.Replay(ctx, f, events.Position{}, pos, func(env *events.Envelope) error {
		p, err := a.Events.Decode(env)
		if err != nil {
			return nil // not a rollout event this binary reads
		}
		out.View.Apply(p)
		out.Version, out.UpdatedAt = env.Sequence, env.Time
		return nil
	})
	if err != nil {
		return out, errs.Unavailable("replaying rollout %s: %v", id, err)
	}
	if out.Version == 0 || out.View.ID == "" {
		return out, errs.NotFound("rollout %s did not exist at %s", id, at)
	}
	st := out.View.State()
	out.Cluster, out.Strategy, out.RequestedBy = st.Cluster, st.Strategy, st.RequestedBy
	return out, nil
}

// ListFilter narrows a list of rollouts.
type ListFilter struct {
	Pool   string
	Status string // a rollout status, or "active"
	Cursor string // the id after which the page starts
	Limit  int
}

// DefaultLimit and MaxLimit bound a page.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// ListRollouts lists rollouts, newest first.
func (a *App) ListRollouts(org string, f ListFilter) ([]RolloutView, string, error) {
	switch f.Status {
	case "", "active", "pending", "running", "paused", "succeeded", "failed", "aborted":
	default:
		return nil, "", errs.Invalid("status", "must be active, pending, running, paused, succeeded, failed or aborted, not %q", f.Status)
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return nil, "", errs.Invalid("limit", "must be between 1 and %d", MaxLimit)
	}
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	all := a.Rollouts.List(org)
	start := 0
	if f.Cursor != "" {
		start = -1
		for i, v := range all {
			if v.View.ID == f.Cursor {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, "", errs.Invalid("cursor", "is not a rollout of this list")
		}
	}
	var out []RolloutView
	for _, v := range all[start:] {
		if f.Pool != "" && v.View.Pool != f.Pool {
			continue
		}
		st := string(v.View.Status)
		if f.Status == "active" && v.View.Over() || f.Status != "" && f.Status != "active" && st != f.Status {
			continue
		}
		if len(out) == f.Limit {
			return out, out[len(out)-1].View.ID, nil
		}
		out = append(out, v)
	}
	return out, "", nil
}

// RolloutLog reads the log from entry after; with wait, it waits up to
// wait for a new entry when there is none yet (a live watch).
func (a *App) RolloutLog(ctx context.Context, org, id string, after, limit int, wait time.Duration) (LogSlice, error) {
	if after < 0 {
		return LogSlice{}, errs.Invalid("after", "must be 0 or more")
	}
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		ch := a.Notify.C(rolloutKey(org, id))
		s, ok := a.Rollouts.Log(org, id, after, limit)
		if !ok {
			return s, errs.NotFound("rollout %s does not exist", id)
		}
		if len(s.Entries) > 0 || s.Final || deadline == nil {
			return s, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return s, nil
		case <-ctx.Done():
			return s, nil
		}
	}
}
