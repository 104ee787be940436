package app

import (
	"context"
	"errors"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Control runs an operator command (Pause, Resume, Abort, Retry) on a
// rollout. expected, when set, is the version the caller read (If-Match).
// It starts from the read model's copy and falls back to the log when the
// optimistic append finds the copy stale. It returns the version after the
// command (unchanged when the command was already done).
func (a *App) Control(ctx context.Context, org, id string, expected uint64, cmd rollout.Command) (uint64, error) {
	r := ref(org, id)
	snap, ok := a.Rollouts.Get(org, id)
	state, version := snap.State, snap.Version
	fromLog := !ok
	for attempt := 1; ; attempt++ {
		if fromLog {
			envs, err := a.Store.Load(ctx, r)
			if err != nil {
				return 0, errs.Unavailable("reading rollout %s: %v", id, err)
			}
			state, version = rollout.State{}, events.Version(envs)
			for i := range envs {
				p, err := a.Events.Decode(&envs[i])
				if err != nil {
					continue // boot's events on the subject are registered; anything else is not ours
				}
				state.Apply(p)
			}
		}
		if expected != 0 && expected != version {
			if !fromLog {
				fromLog = true
				continue
			}
			return 0, errs.Precondition("rollout %s is at version %d, not the expected %d; reload and try again", id, version, expected)
		}
		evs, err := rollout.Decide(state, cmd, a.now())
		if err != nil || len(evs) == 0 {
			if !fromLog {
				fromLog = true // decided on a copy: decide again on the log
				continue
			}
			return version, err
		}
		drafts := make([]events.Draft, len(evs))
		for i, e := range evs {
			drafts[i] = events.Draft{Payload: e.(events.Payload)}
		}
		envs, err := a.Store.Append(ctx, r, version, drafts...)
		var conflict *events.ConflictError
		if errors.As(err, &conflict) && attempt < 8 {
			fromLog = true
			continue
		}
		if err != nil {
			return 0, errs.Unavailable("appending to rollout %s: %v", id, err)
		}
		a.Metrics.rolloutEvents(state, evs)
		a.Log.InfoContext(ctx, "rollout "+cmd.CommandType(), "org", org, "rollout", id, "actor", events.Actor(ctx))
		return events.Version(envs), nil
	}
}
