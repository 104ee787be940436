package readmodel

import (
	"sync"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/machineop"
)

// Operations is the projection of the one-machine operations. It
// implements projection.Model and app.Operations.
type Operations struct {
	// OnChange is called after an event was applied (created: its first).
	OnChange func(org, id string, created bool)

	projection.Position
	mu    sync.RWMutex
	byKey map[string]*opEntry
	order []*opEntry
}

type opEntry struct {
	org     string
	state   machineop.State
	version uint64
}

// NewOperations returns an empty model.
func NewOperations() *Operations { return &Operations{byKey: map[string]*opEntry{}} }

// Apply implements projection.Model.
func (m *Operations) Apply(env *events.Envelope, payload any) error {
	m.mu.Lock()
	k := key(env.Org, env.AggregateID)
	e, ok := m.byKey[k]
	if !ok {
		e = &opEntry{org: env.Org}
	}
	e.state.Apply(payload)
	created := !ok && e.state.Exists()
	if created {
		m.byKey[k] = e
		m.order = append(m.order, e)
	}
	if ok || created {
		e.version = env.Sequence
	}
	m.SetCheckpoint(env.Sequence)
	m.mu.Unlock()
	if (ok || created) && m.OnChange != nil {
		m.OnChange(env.Org, env.AggregateID, created)
	}
	return nil
}

// Reset implements projection.Model.
func (m *Operations) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byKey, m.order = map[string]*opEntry{}, nil
	m.SetCheckpoint(0)
}

func (e *opEntry) snapshot() app.OperationSnapshot {
	st := e.state
	st.Log = append([]machineop.Entry(nil), e.state.Log...)
	st.Steps = append([]machineop.Step(nil), e.state.Steps...)
	return app.OperationSnapshot{Org: e.org, State: st, Version: e.version}
}

// Get implements app.Operations.
func (m *Operations) Get(org, id string) (app.OperationSnapshot, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.byKey[key(org, id)]
	if !ok {
		return app.OperationSnapshot{}, false
	}
	return e.snapshot(), true
}

// Running implements app.Operations.
func (m *Operations) Running() []app.OperationSnapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []app.OperationSnapshot
	for _, e := range m.order {
		if !e.state.Status.Final() {
			out = append(out, e.snapshot())
		}
	}
	return out
}

// ForMachine implements app.Operations.
func (m *Operations) ForMachine(org, uuid string) []app.OperationSnapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []app.OperationSnapshot
	for i := len(m.order) - 1; i >= 0; i-- {
		if e := m.order[i]; e.org == org && e.state.Machine == uuid {
			out = append(out, e.snapshot())
		}
	}
	return out
}

// List implements app.Operations: newest first.
func (m *Operations) List(org string) []app.OperationSnapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []app.OperationSnapshot
	for i := len(m.order) - 1; i >= 0; i-- {
		if e := m.order[i]; e.org == org {
			out = append(out, e.snapshot())
		}
	}
	return out
}
