// Package adapters connects the registry to JetStream: the read models that
// projections keep up to date, and the heartbeat KV bucket.
package adapters

import (
	"sync"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// MachineProjection adapts the machine read model to projection.Model.
type MachineProjection struct {
	mu    sync.RWMutex
	model *readmodel.Model
}

// NewMachineProjection returns an empty projection.
func NewMachineProjection() *MachineProjection {
	return &MachineProjection{model: readmodel.New()}
}

// Model is the current read model; a Reset swaps it, so callers fetch it per
// use rather than keep it.
func (p *MachineProjection) Model() *readmodel.Model {
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

func (p *MachineProjection) Reset() {
	p.mu.Lock()
	p.model = readmodel.New()
	p.mu.Unlock()
}
