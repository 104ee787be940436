package projection

import "sync/atomic"

// Position is the checkpoint a read model keeps beside its state. Embedded
// in a model, it provides Model's Skip and Checkpoint; the model's Apply
// and Reset call SetCheckpoint while they hold the model's own write lock,
// so that a reader who sees a checkpoint and then takes the read lock also
// sees the state that checkpoint covers.
type Position struct{ seq atomic.Uint64 }

// Skip moves the checkpoint past an event the model does not use.
func (p *Position) Skip(seq uint64) { p.seq.Store(seq) }

// Checkpoint is the sequence of the last event applied or skipped.
func (p *Position) Checkpoint() uint64 { return p.seq.Load() }

// SetCheckpoint records the sequence of the event just applied, or 0 on
// a reset.
func (p *Position) SetCheckpoint(seq uint64) { p.seq.Store(seq) }
