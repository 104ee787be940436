// Package readmodel is the in-memory projection of machines that answers
// the registry's queries. It is built by applying events in log order,
// checkpointed by stream sequence, and can be snapshotted, restored and
// hashed so that a rebuild can be proved to reach the same state.
//
// Every query takes the organization, and each organization has its own
// indexes, so nothing of one organization is ever reachable from another's
// query.
package readmodel

import (
	"encoding/binary"
	"encoding/hex"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/google/btree"
)

// Machine is one machine as the read model shows it.
//
// Its maps, slices and pointers (labels, hardware, failure, deletion) are
// shared with the model and must be treated as read-only; Clone gives a
// private copy. Sharing is safe because the model never changes them in
// place (machine.State.Apply replaces rather than mutates), and it keeps a
// page of 100 machines from allocating 100 label maps.
type Machine struct {
	Org string `json:"org"`
	machine.State
	CreatedAt time.Time `json:"created_at"` // envelope time of the event that created it
	UpdatedAt time.Time `json:"updated_at"` // envelope time of the last event applied
	// LastSeen is the agent's last heartbeat, set by SetLastSeen. It is not
	// derived from events, so Hash ignores it.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Boot is the machine's latest iPXE boot as reported (SetIPXEBoot),
	// which may be later than the last one recorded in the log
	// (State.LastIPXEBootAt; see machine.IPXEBootDue). It is not derived
	// from events, so Hash ignores it; Shown merges it into the state.
	Boot IPXEBoot `json:"-"`
	// Version is the stream sequence of the machine's last event: its
	// optimistic-concurrency version and ETag.
	Version uint64 `json:"version"`
}

// IPXEBoot is an iPXE boot: when, and when the firmware said it would ask
// again (zero: it was not told to wait).
type IPXEBoot struct {
	At, RetryBy time.Time
}

// Shown is the machine's state as the API shows it: its events' fold with
// its latest iPXE boot. Commands decide on State, the fold alone.
func (m Machine) Shown() machine.State { return m.State.WithIPXEBoot(m.Boot.At, m.Boot.RetryBy) }

// key is a UUID's 16 bytes; its byte order is the canonical string order.
type key [16]byte

func (k key) String() string {
	b := k.canonical()
	return string(b[:])
}

// canonical spells k without allocating.
func (k key) canonical() (b [36]byte) {
	hex.Encode(b[0:8], k[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], k[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], k[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], k[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], k[10:16])
	return b
}

// keyOf converts a canonical UUID (as from machine.ParseUUID).
func keyOf(canonical string) (k key) {
	s := canonical[0:8] + canonical[9:13] + canonical[14:18] + canonical[19:23] + canonical[24:36]
	_, _ = hex.Decode(k[:], []byte(s))
	return k
}

type record struct {
	key      key
	state    machine.State
	created  time.Time
	updated  time.Time
	lastSeen time.Time
	boot     IPXEBoot // the latest iPXE boot reported, recorded or not
	version  uint64   // stream sequence of the machine's last event
	// enc is the machine's JSON without last_seen (see encoded.go): nil
	// until it is read, and again after each change.
	enc atomic.Pointer[[]byte]
}

// Clone returns a deep copy that the caller may modify.
func (m Machine) Clone() Machine {
	m.State = m.State.Clone()
	return m
}

func (r *record) view(org string) Machine {
	return Machine{Org: org, State: r.state, CreatedAt: r.created, UpdatedAt: r.updated, LastSeen: r.lastSeen, Boot: r.boot, Version: r.version}
}

// shown is the state the API shows (see Machine.Shown).
func (r *record) shown() machine.State { return r.state.WithIPXEBoot(r.boot.At, r.boot.RetryBy) }

func less(a, b *record) bool {
	ah, bh := binary.BigEndian.Uint64(a.key[:8]), binary.BigEndian.Uint64(b.key[:8])
	if ah != bh {
		return ah < bh
	}
	return binary.BigEndian.Uint64(a.key[8:]) < binary.BigEndian.Uint64(b.key[8:])
}

type tree = btree.BTreeG[*record]

const degree = 32

func newTree() *tree { return btree.NewG[*record](degree, less) }

// orgIndex holds one organization's machines, ordered by UUID, with
// secondary indexes by pool, by status and by label value, so that a
// filtered page walks the smallest set of candidates.
type orgIndex struct {
	byKey    map[key]*record
	all      *tree
	byPool   map[string]*tree
	byStatus map[machine.Status]*tree
	byLabel  map[label]*tree
}

type label struct{ key, value string }

func newOrgIndex() *orgIndex {
	return &orgIndex{
		byKey: map[key]*record{}, all: newTree(),
		byPool: map[string]*tree{}, byStatus: map[machine.Status]*tree{}, byLabel: map[label]*tree{},
	}
}

// secondary is what the secondary indexes are keyed on.
type secondary struct {
	pool   string
	status machine.Status
	labels map[string]string // never mutated in place by Apply, so safe to keep
}

func secondaryOf(st *machine.State) secondary {
	return secondary{pool: st.Pool, status: st.Status, labels: st.Labels}
}

func (a secondary) equal(b secondary) bool {
	return a.pool == b.pool && a.status == b.status && maps.Equal(a.labels, b.labels)
}

func add[K comparable](m map[K]*tree, k K, r *record) {
	t := m[k]
	if t == nil {
		t = newTree()
		m[k] = t
	}
	t.ReplaceOrInsert(r)
}

func del[K comparable](m map[K]*tree, k K, r *record) {
	if t := m[k]; t != nil {
		t.Delete(r)
		if t.Len() == 0 {
			delete(m, k)
		}
	}
}

func (o *orgIndex) index(r *record, s secondary) {
	if s.pool != "" {
		add(o.byPool, s.pool, r)
	}
	add(o.byStatus, s.status, r)
	for k, v := range s.labels {
		add(o.byLabel, label{k, v}, r)
	}
}

func (o *orgIndex) unindex(r *record, s secondary) {
	del(o.byPool, s.pool, r)
	del(o.byStatus, s.status, r)
	for k, v := range s.labels {
		del(o.byLabel, label{k, v}, r)
	}
}

func (o *orgIndex) insert(r *record) {
	o.byKey[r.key] = r
	o.all.ReplaceOrInsert(r)
	o.index(r, secondaryOf(&r.state))
}

func (o *orgIndex) remove(r *record, s secondary) {
	delete(o.byKey, r.key)
	o.all.Delete(r)
	o.unindex(r, s)
}

// Model is the machine read model. It is safe for concurrent use: Apply
// and SetLastSeen take the write lock, queries the read lock.
type Model struct {
	mu         sync.RWMutex
	checkpoint uint64
	orgs       map[string]*orgIndex
	strs       interner
	scanBudget int // 0: ScanBudget; tests lower it to force partial pages
	// notify, if set, hears every change of a machine's answer, under the
	// write lock (see Notify).
	notify func(Change)
}

// Change is a change of one machine's answer: by an event at stream
// sequence Seq, by a recorded boot (Seq 0), or, with SeenOnly, a
// heartbeat that moved its last_seen alone.
type Change struct {
	Org, UUID string
	Seq       uint64
	SeenOnly  bool
}

// Notify makes fn hear every change of a machine's answer from now on,
// in the order they happen: fn runs under the model's write lock, so it
// must not block or call back into the model. Set it before the model is
// shared.
func (m *Model) Notify(fn func(Change)) { m.notify = fn }

func (m *Model) changed(c Change) {
	if m.notify != nil {
		m.notify(c)
	}
}

// New returns an empty model at checkpoint 0.
func New() *Model {
	return &Model{orgs: map[string]*orgIndex{}, strs: interner{}}
}

// Checkpoint is the sequence of the last event applied.
func (m *Model) Checkpoint() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.checkpoint
}

// Apply projects one event at stream sequence seq, for machineUUID in org,
// recorded at time at. Events at or below the checkpoint were already
// applied and are ignored, so redelivery is harmless; so are events at or
// below the machine's version, which a snapshot taken while events were
// applied may hold beyond its checkpoint (see Snapshot). Events that are not
// machine events (and events with an unusable UUID, which the registry
// never writes) only advance the checkpoint.
func (m *Model) Apply(seq uint64, org, machineUUID string, at time.Time, event any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq <= m.checkpoint {
		return
	}
	m.checkpoint = seq
	if m.orgs == nil { // a zero Model is usable
		m.orgs, m.strs = map[string]*orgIndex{}, interner{}
	}
	if _, ok := event.(machine.Event); !ok || org == "" {
		return
	}
	id, err := machine.ParseUUID(machineUUID)
	if err != nil {
		return
	}
	k, at := keyOf(id), at.UTC()
	o := m.orgs[org]
	var r *record
	if o != nil {
		r = o.byKey[k]
	}
	if r != nil && seq <= r.version {
		return
	}
	if r == nil {
		var st machine.State
		st.Apply(event)
		if !st.Exists() {
			return
		}
		if o == nil {
			o = newOrgIndex()
			m.orgs[m.strs.get(org)] = o
		}
		r = &record{key: k, state: st, created: at, updated: at, version: seq}
		m.strs.state(&r.state, event)
		o.insert(r)
		m.changed(Change{Org: org, UUID: id, Seq: seq})
		return
	}
	before := secondaryOf(&r.state)
	r.state.Apply(event)
	m.changed(Change{Org: org, UUID: id, Seq: seq})
	if !r.state.Exists() {
		o.remove(r, before)
		return
	}
	r.updated, r.version = at, seq
	r.invalidate()
	m.strs.state(&r.state, event)
	if after := secondaryOf(&r.state); !after.equal(before) {
		o.unindex(r, before)
		o.index(r, after)
	}
}

// SetLastSeen records an agent heartbeat time for an existing machine. It
// is not an event: it does not move the checkpoint and is not hashed. Older
// times than the one recorded are ignored.
func (m *Model) SetLastSeen(org, machineUUID string, t time.Time) {
	id, err := machine.ParseUUID(machineUUID)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.orgs[org]; o != nil {
		if r := o.byKey[keyOf(id)]; r != nil && t.After(r.lastSeen) {
			r.lastSeen = t.UTC()
			m.changed(Change{Org: org, UUID: id, SeenOnly: true})
		}
	}
}

// SetIPXEBoot records a machine's latest iPXE boot, which the log may not
// hold (see machine.IPXEBootDue). Like SetLastSeen it is not an event and
// is not hashed; an older boot than the one recorded is ignored.
func (m *Model) SetIPXEBoot(org, machineUUID string, at, retryBy time.Time) {
	id, err := machine.ParseUUID(machineUUID)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.orgs[org]; o != nil {
		if r := o.byKey[keyOf(id)]; r != nil && at.After(r.boot.At) {
			before := r.shown()
			r.boot = IPXEBoot{At: at.UTC(), RetryBy: utc(retryBy)}
			if after := r.shown(); !after.LastIPXEBootAt.Equal(before.LastIPXEBootAt) || !after.IPXERetryBy.Equal(before.IPXERetryBy) {
				r.invalidate() // its encoding shows the boot
				m.changed(Change{Org: org, UUID: id})
			}
		}
	}
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// CountRegisteredWith counts org's machines that registered with the
// enrollment token tokenID.
func (m *Model) CountRegisteredWith(org, tokenID string) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := 0
	if o := m.orgs[org]; o != nil {
		for _, r := range o.byKey {
			if r.state.EnrollmentTokenID == tokenID {
				n++
			}
		}
	}
	return n
}

// Get returns one machine of org.
func (m *Model) Get(org, machineUUID string) (Machine, error) {
	id, err := machine.ParseUUID(machineUUID)
	if err != nil {
		return Machine{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.orgs[org]; o != nil {
		if r := o.byKey[keyOf(id)]; r != nil {
			return r.view(org), nil
		}
	}
	return Machine{}, errs.NotFound("machine %s not found in organization %s", id, org)
}
