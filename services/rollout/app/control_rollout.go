package app

import (
	"context"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Control runs an operator command (Pause, Resume, Abort, Retry) on a
// rollout. expected, when set, is the version the caller read (If-Match).
// It decides on the read model's copy first; the executor decides again on
// the log when the optimistic append finds the copy stale, or when the
// copy refuses or changes nothing. It returns the version after the
// command (unchanged when the command was already done).
func (a *App) Control(ctx context.Context, org, id string, expected uint64, cmd rollout.Command) (uint64, error) {
	// before is the state the last decision was made on, and decided its
	// events: the metrics observe what each of them ends.
	var before rollout.State
	var decided []any
	res, err := a.rollouts().Execute(ctx, aggregate.Command[rollout.State]{Ref: ref(org, id), Expected: expected,
		Cached: func() (rollout.State, uint64, bool) {
			snap, ok := a.Rollouts.Get(org, id)
			return snap.State.Clone(), snap.Version, ok
		},
		Decide: func(s rollout.State, now time.Time) ([]any, error) {
			evs, err := rollout.Decide(s, cmd, now)
			decided = nil
			if err == nil && len(evs) > 0 {
				before, decided = s.Clone(), evs // the executor applies the events to s
			}
			return evs, err
		}})
	if err != nil {
		return 0, err
	}
	if len(res.Stored) > 0 {
		// On success the last decision's events are all stored (an earlier
		// attempt may have stored a prefix of its own before losing a race).
		a.Metrics.rolloutEvents(before, decided)
		a.Log.InfoContext(ctx, "rollout "+cmd.CommandType(), "org", org, "rollout", id, "actor", events.Actor(ctx))
	}
	return res.Version, nil
}
