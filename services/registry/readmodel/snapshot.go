package readmodel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

const snapshotVersion = 1

type snapshot struct {
	Version    int              `json:"version"`
	Checkpoint uint64           `json:"checkpoint"`
	Machines   []snapshotRecord `json:"machines"`
}

type snapshotRecord struct {
	Org       string        `json:"org"`
	State     machine.State `json:"state"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
	Version   uint64        `json:"version"`
	LastSeen  time.Time     `json:"last_seen,omitzero"`
	BootAt    time.Time     `json:"ipxe_boot_at,omitzero"`
	RetryBy   time.Time     `json:"ipxe_retry_by,omitzero"`
}

// copyAll copies every record under the read lock, organizations in name
// order and machines in UUID order, so that snapshots and hashes are
// deterministic. The copies are shallow, which is safe because Apply never
// changes a published map, slice or pointer in place; encoding then happens
// without holding up the projection.
func (m *Model) copyAll() (uint64, []snapshotRecord) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	orgs := make([]string, 0, len(m.orgs))
	n := 0
	for org, o := range m.orgs {
		orgs = append(orgs, org)
		n += len(o.byKey)
	}
	slices.Sort(orgs)
	out := make([]snapshotRecord, 0, n)
	for _, org := range orgs {
		m.orgs[org].all.Ascend(func(r *record) bool {
			out = append(out, snapshotRecord{Org: org, State: r.state, CreatedAt: r.created, UpdatedAt: r.updated, LastSeen: r.lastSeen,
				BootAt: r.boot.At, RetryBy: r.boot.RetryBy, Version: r.version})
			return true
		})
	}
	return m.checkpoint, out
}

// Snapshot serializes the model and its checkpoint as one blob, so that a
// restart resumes from the checkpoint instead of replaying the log.
func (m *Model) Snapshot() ([]byte, error) {
	cp, recs := m.copyAll()
	b, err := json.Marshal(snapshot{Version: snapshotVersion, Checkpoint: cp, Machines: recs})
	if err != nil {
		return nil, errs.Internal("encoding read model snapshot: %v", err)
	}
	return b, nil
}

// Restore replaces the model with a snapshot. On error the model is left as
// it was.
func (m *Model) Restore(blob []byte) error {
	var snap snapshot
	if err := json.Unmarshal(blob, &snap); err != nil {
		return errs.Internal("decoding read model snapshot: %v", err)
	}
	if snap.Version != snapshotVersion {
		return errs.Internal("read model snapshot has version %d, this build reads %d", snap.Version, snapshotVersion)
	}
	orgs, strs := map[string]*orgIndex{}, interner{}
	for i, sr := range snap.Machines {
		id, err := machine.ParseUUID(sr.State.UUID)
		if err != nil || sr.Org == "" || !sr.State.Status.Valid() {
			return errs.Internal("read model snapshot: machine %d (%q in %q) is not valid", i, sr.State.UUID, sr.Org)
		}
		org := strs.get(sr.Org)
		o := orgs[org]
		if o == nil {
			o = newOrgIndex()
			orgs[org] = o
		}
		k := keyOf(id)
		if o.byKey[k] != nil {
			return errs.Internal("read model snapshot: machine %s appears twice in %s", id, org)
		}
		r := &record{key: k, state: sr.State, created: sr.CreatedAt.UTC(), updated: sr.UpdatedAt.UTC(), version: sr.Version}
		if !sr.LastSeen.IsZero() {
			r.lastSeen = sr.LastSeen.UTC()
		}
		r.boot = IPXEBoot{At: utc(sr.BootAt), RetryBy: utc(sr.RetryBy)}
		strs.all(&r.state)
		o.insert(r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checkpoint, m.orgs, m.strs = snap.Checkpoint, orgs, strs
	return nil
}

// hashed is what Hash covers of a record: everything derived from events.
type hashed struct {
	Org       string        `json:"org"`
	State     machine.State `json:"state"`
	CreatedAt int64         `json:"created_at"`
	UpdatedAt int64         `json:"updated_at"`
	Version   uint64        `json:"version"`
}

// Hash is a digest of the checkpoint and every machine, excluding
// heartbeat times and unrecorded iPXE boots, for checking that two builds (a replay from zero, a
// restore, a replica) reached the same state.
func (m *Model) Hash() [32]byte {
	cp, recs := m.copyAll()
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], cp)
	h.Write(n[:])
	for _, r := range recs {
		buf, err := json.Marshal(hashed{Org: r.Org, State: r.State, CreatedAt: r.CreatedAt.UnixNano(), UpdatedAt: r.UpdatedAt.UnixNano(), Version: r.Version})
		if err != nil { // a State always encodes; keep the hash total anyway
			buf = []byte(err.Error())
		}
		binary.BigEndian.PutUint64(n[:], uint64(len(buf)))
		h.Write(n[:])
		h.Write(buf)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}
