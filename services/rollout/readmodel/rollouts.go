// Package readmodel holds the rollout service's projections: every
// rollout's Operation view (for the API, the sanity checks' "exclusive"
// rule and the supervisor), and every one-machine operation's.
package readmodel

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Rollouts is the projection of every rollout event. It implements
// projection.Model and app.Rollouts.
type Rollouts struct {
	// OnChange is called after an event was applied to rollout org/id;
	// created is set for its first event, active tells whether it still
	// runs. It must not block.
	OnChange func(org, id string, created, active bool)
	// Waiter waits until the projection applied a sequence (the runner).
	Waiter interface {
		WaitFor(ctx context.Context, seq uint64) error
	}
	// Now is the clock the conditions of an exported rollout are computed
	// at (nil: time.Now).
	Now func() time.Time

	projection.Position
	mu    sync.RWMutex
	byKey map[string]*entry
	order []*entry // oldest first
}

type entry struct {
	org     string
	view    operation.View
	version uint64
	at      events.Envelope // the last event's envelope (time), without payload
}

// NewRollouts returns an empty model.
func NewRollouts() *Rollouts { return &Rollouts{byKey: map[string]*entry{}} }

func key(org, id string) string { return org + "/" + id }

// Apply implements projection.Model.
func (m *Rollouts) Apply(env *events.Envelope, payload any) error {
	m.mu.Lock()
	k := key(env.Org, env.AggregateID)
	e, ok := m.byKey[k]
	if !ok {
		e = &entry{org: env.Org}
	}
	e.view.Apply(payload)
	created := !ok && e.view.ID != ""
	if created {
		m.byKey[k] = e
		m.order = append(m.order, e)
	}
	if ok || created {
		e.version = env.Sequence
		e.at = events.Envelope{Time: env.Time}
	}
	m.SetCheckpoint(env.Sequence)
	active := e.view.ID != "" && !e.view.Over()
	m.mu.Unlock()
	if (ok || created) && m.OnChange != nil {
		m.OnChange(env.Org, env.AggregateID, created, active)
	}
	return nil
}

// Reset implements projection.Model.
func (m *Rollouts) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byKey, m.order = map[string]*entry{}, nil
	m.SetCheckpoint(0)
}

// Get implements app.Rollouts.
func (m *Rollouts) Get(org, id string) (app.Snapshot, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.byKey[key(org, id)]
	if !ok {
		return app.Snapshot{}, false
	}
	return app.Snapshot{Org: org, State: e.view.State(), Version: e.version}, true
}

// Active implements app.Rollouts.
func (m *Rollouts) Active() []app.Snapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []app.Snapshot
	for _, e := range m.order {
		if !e.view.Over() {
			out = append(out, app.Snapshot{Org: e.org, State: e.view.State(), Version: e.version})
		}
	}
	return out
}

// Peek implements app.Rollouts.
func (m *Rollouts) Peek(org, id string, fn func(*rollout.State)) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.byKey[key(org, id)]
	if ok {
		e.view.Peek(fn)
	}
	return ok
}

// PeekActive implements app.Rollouts.
func (m *Rollouts) PeekActive(fn func(org string, s *rollout.State) bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, e := range m.order {
		if e.view.Over() {
			continue
		}
		more := true
		e.view.Peek(func(s *rollout.State) { more = fn(e.org, s) })
		if !more {
			return
		}
	}
}

// CountByStatus counts the rollouts by status (app.RolloutCounter, for
// the anvil_rollouts gauge).
func (m *Rollouts) CountByStatus() map[rollout.Status]int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[rollout.Status]int{}
	for _, e := range m.order {
		out[e.view.Status]++
	}
	return out
}

// WaitFor implements app.Rollouts.
func (m *Rollouts) WaitFor(ctx context.Context, seq uint64) error {
	if m.Waiter == nil {
		return nil
	}
	return m.Waiter.WaitFor(ctx, seq)
}

func (e *entry) export(withLog, withMachines bool, now time.Time) app.RolloutView {
	cluster, strategy, requestedBy := e.view.Origin()
	v := e.view
	v.Machines = nil
	v.Log = nil
	if withMachines {
		v.Machines = slices.Clone(e.view.Machines)
	}
	if withLog {
		v.Log = slices.Clone(e.view.Log)
	}
	v.Excluded = slices.Clone(e.view.Excluded)
	v.Checks = slices.Clone(e.view.Checks)
	// It reads the live state: the caller holds the read lock.
	v.Explain(func(s rollout.State) []rollout.Block { return plan.Next(s, now).Waiting }, now)
	v.Detach()
	return app.RolloutView{
		Org: e.org, View: v, Cluster: cluster, Strategy: strategy, RequestedBy: requestedBy,
		UpdatedAt: e.at.Time, Version: e.version, LogLength: len(e.view.Log),
	}
}

// View implements app.Rollouts.
func (m *Rollouts) View(org, id string, withLog bool) (app.RolloutView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.byKey[key(org, id)]
	if !ok {
		return app.RolloutView{}, false
	}
	return e.export(withLog, true, m.now()), true
}

// List implements app.Rollouts.
func (m *Rollouts) List(org string) []app.RolloutView {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []app.RolloutView
	for i := len(m.order) - 1; i >= 0; i-- {
		if e := m.order[i]; e.org == org {
			out = append(out, e.export(false, false, m.now()))
		}
	}
	return out
}

// Log implements app.Rollouts.
func (m *Rollouts) Log(org, id string, after, limit int) (app.LogSlice, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.byKey[key(org, id)]
	if !ok {
		return app.LogSlice{}, false
	}
	log := e.view.Log
	after = min(after, len(log))
	end := min(after+limit, len(log))
	return app.LogSlice{
		Entries: slices.Clone(log[after:end]), Next: end, Status: string(e.view.Status),
		Final: e.view.Over() && end == len(log),
	}, true
}

func (m *Rollouts) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}
