package events

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is the in-memory Store for unit tests of pure logic. It keeps
// the JetStream store's semantics: one global sequence, per-subject
// optimistic concurrency, and deduplication by event ID.
type MemoryStore struct {
	reg *Registry
	now func() time.Time

	mu      sync.RWMutex
	log     []Envelope        // index i holds sequence i+1
	last    map[string]uint64 // subject -> last sequence
	seenIDs map[string]uint64 // event ID -> sequence
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore(reg *Registry) *MemoryStore {
	return &MemoryStore{reg: reg, now: time.Now, last: map[string]uint64{}, seenIDs: map[string]uint64{}}
}

func (m *MemoryStore) Append(ctx context.Context, ref AggregateRef, expected uint64, drafts ...Draft) ([]Envelope, error) {
	envs, err := seal(ctx, m.reg, ref, m.now(), "", drafts)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	subj := ref.Subject()
	for i := range envs {
		if seq, dup := m.seenIDs[envs[i].ID]; dup {
			envs[i] = m.log[seq-1]
			expected = seq
			continue
		}
		if expected != Any && m.last[subj] != expected {
			return envs[:i], &ConflictError{Ref: ref, Expected: expected, Actual: m.last[subj]}
		}
		seq := uint64(len(m.log) + 1)
		envs[i].Sequence = seq
		m.log = append(m.log, envs[i])
		m.last[subj] = seq
		m.seenIDs[envs[i].ID] = seq
		if expected != Any {
			expected = seq
		}
	}
	return envs, nil
}

func (m *MemoryStore) Load(ctx context.Context, ref AggregateRef) ([]Envelope, error) {
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	var out []Envelope
	err := m.Replay(ctx, Filter{Org: ref.Org, AggregateType: ref.Type, AggregateID: ref.ID}, Position{}, Position{}, func(e *Envelope) error {
		out = append(out, *e)
		return nil
	})
	return out, err
}

func (m *MemoryStore) Replay(ctx context.Context, f Filter, from, to Position, fn func(*Envelope) error) error {
	m.mu.RLock()
	snapshot := m.log
	m.mu.RUnlock()
	for i := range snapshot {
		e := snapshot[i]
		if !inRange(&e, from, to) || !f.match(&e) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

func (m *MemoryStore) Head(context.Context) (uint64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return uint64(len(m.log)), nil
}

func (f Filter) match(e *Envelope) bool {
	return (f.Org == "" || f.Org == e.Org) &&
		(f.AggregateType == "" || f.AggregateType == e.AggregateType) &&
		(f.AggregateID == "" || f.AggregateID == e.AggregateID) &&
		f.matchType(e.Type)
}

// inRange applies from/to by sequence and by the envelope's time.
func inRange(e *Envelope, from, to Position) bool {
	if from.Seq != 0 && e.Sequence < from.Seq || to.Seq != 0 && e.Sequence > to.Seq {
		return false
	}
	if !from.Time.IsZero() && e.Time.Before(from.Time) || !to.Time.IsZero() && e.Time.After(to.Time) {
		return false
	}
	return true
}
