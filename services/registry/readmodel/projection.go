package readmodel

import (
	"bytes"
	"sync"

	"github.com/anvil-fleet/anvil/libs/events"
)

// MachineProjection adapts the machine read model to projection.Model and
// projection.Snapshotter.
type MachineProjection struct {
	mu    sync.RWMutex
	model *Model
	// notify and replaced: see Notify.
	notify   func(Change)
	replaced func()
}

// Notify makes the projection's model, and every model a Reset or Restore
// puts in its place, tell fn of each change of a machine's answer (see
// Model.Notify), and calls replaced at each such swap, under the
// projection's lock (it must not read the projection). Set it before the
// projection runs.
func (p *MachineProjection) Notify(fn func(Change), replaced func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify, p.replaced = fn, replaced
	p.model.Notify(fn)
}

// swap puts m in place of the model and says so, before anyone can read
// the new model (its checkpoint included): a change notice sent after the
// swap says reset.
func (p *MachineProjection) swap(m *Model) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m.Notify(p.notify)
	p.model = m
	if p.replaced != nil {
		p.replaced()
	}
}

// NewMachineProjection returns an empty projection.
func NewMachineProjection() *MachineProjection {
	return &MachineProjection{model: New()}
}

// Model is the current read model; a Reset swaps it, so callers fetch it per
// use rather than keep it.
func (p *MachineProjection) Model() *Model {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.model
}

func (p *MachineProjection) Apply(env *events.Envelope, payload any) error {
	p.Model().Apply(env.Sequence, env.Org, env.AggregateID, env.Time, payload)
	return nil
}

// Skip advances the checkpoint: the read model ignores an event it cannot
// place (no org or machine), which is what Skip needs.
func (p *MachineProjection) Skip(seq uint64) {
	p.Model().Apply(seq, "", "", timeZero, nil)
}

func (p *MachineProjection) Checkpoint() uint64 { return p.Model().Checkpoint() }

func (p *MachineProjection) Reset() { p.swap(New()) }

// Snapshot appends the model to w (projection.Snapshotter). Only the
// encoding holds up Apply.
func (p *MachineProjection) Snapshot(w *bytes.Buffer) (uint64, error) {
	blob, checkpoint := p.Model().Snapshot(w.AvailableBuffer())
	_, err := w.Write(blob) // in place, unless the encoding outgrew w
	return checkpoint, err
}

// Restore replaces the model with a snapshot (projection.Snapshotter). It
// builds a new model, so a bad snapshot leaves the current one as it was.
func (p *MachineProjection) Restore(r *bytes.Buffer) (uint64, error) {
	m := New()
	if err := m.Restore(r.Bytes()); err != nil {
		return 0, err
	}
	p.swap(m)
	return m.Checkpoint(), nil
}
