package readmodel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// A snapshot is binary rather than JSON because a restart waits for it:
// JSON took 1.6 s to decode 100,000 machines and 925 bytes each, this
// format a tenth of both. Strings that repeat across machines (statuses,
// pools, labels, token IDs, disk and NIC names) are written once and then
// referred to by number, which also interns them on restore.
//
// snapshotVersion changes with the format and whenever Apply derives
// something new from the same events: a snapshot of another version is
// refused, and the projection rebuilds from the log instead. Version 1 was
// JSON.
const snapshotVersion = 2

// snapshotMagic starts every snapshot, so that a blob of something else is
// told apart from a damaged one; the byte after it is the version.
const snapshotMagic = "anvil-machines\x00"

// snapshotBatch is how many machines Snapshot encodes per hold of the read
// lock (a millisecond or two); tests lower it.
var snapshotBatch = 1024

// betweenSnapshotBatches, if set, runs while Snapshot does not hold the
// lock: tests apply events there.
var betweenSnapshotBatches func()

// Snapshot encodes the model and returns the checkpoint to replay from.
// It does not stop Apply for the whole encoding (a second at a million
// machines), only for batches of snapshotBatch machines: each machine is
// encoded as it is at that moment, which may include events after the
// checkpoint, those of the moment the encoding began. Replaying the events
// after the checkpoint onto the restored model gives the exact state all
// the same, because Apply skips an event that a machine's version already
// covers, and a machine missing from the snapshot was created, or deleted,
// by an event after the checkpoint. dst, which may be nil, is appended to.
func (m *Model) Snapshot(dst []byte) (blob []byte, checkpoint uint64) {
	m.mu.RLock()
	checkpoint = m.checkpoint
	orgs := make([]string, 0, len(m.orgs))
	for org := range m.orgs {
		orgs = append(orgs, org)
	}
	m.mu.RUnlock()
	slices.Sort(orgs) // organizations are never removed
	e := snapshotEncoder{buf: append(dst, snapshotMagic...), syms: map[string]uint64{}}
	e.buf = append(e.buf, snapshotVersion)
	e.uvarint(checkpoint)
	e.uvarint(uint64(len(orgs)))
	for _, org := range orgs {
		e.str(org)
		// Each batch goes on from the last machine of the one before, by
		// key: the tree may have changed in between.
		var last key
		pivot := &record{}
		for batch := 0; ; batch++ {
			n := 0
			encode := func(r *record) bool {
				if batch > 0 && r.key == pivot.key {
					return true // encoded in the batch before
				}
				e.buf = append(e.buf, 1) // a machine follows
				e.record(r)
				last, n = r.key, n+1
				return n < snapshotBatch
			}
			m.mu.RLock()
			if batch == 0 {
				m.orgs[org].all.Ascend(encode)
			} else {
				pivot.key = last
				m.orgs[org].all.AscendGreaterOrEqual(pivot, encode)
			}
			m.mu.RUnlock()
			if n < snapshotBatch {
				break
			}
			if betweenSnapshotBatches != nil {
				betweenSnapshotBatches()
			}
		}
		e.buf = append(e.buf, 0) // no more machines in org
	}
	return e.buf, checkpoint
}

// Restore replaces the model with a snapshot. On error the model is left as
// it was.
func (m *Model) Restore(blob []byte) error {
	d := snapshotDecoder{buf: blob, strs: interner{}}
	checkpoint, orgs, err := d.model()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checkpoint, m.orgs, m.strs = checkpoint, orgs, d.strs
	return nil
}

type snapshotEncoder struct {
	buf  []byte
	syms map[string]uint64 // number of each string written by sym, from 1
	keys []string          // scratch: a machine's label keys
}

func (e *snapshotEncoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *snapshotEncoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }

func (e *snapshotEncoder) bool(v bool) {
	if v {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

func (e *snapshotEncoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// sym writes a string that repeats across machines: 0 for "", n<<1 for
// the n-th one written before, len<<1|1 and the bytes for a new one.
func (e *snapshotEncoder) sym(s string) {
	if s == "" {
		e.uvarint(0)
		return
	}
	if n, ok := e.syms[s]; ok {
		e.uvarint(n << 1)
		return
	}
	e.syms[s] = uint64(len(e.syms) + 1)
	e.uvarint(uint64(len(s))<<1 | 1)
	e.buf = append(e.buf, s...)
}

// Times keep their offset (which JSON shows, and so Hash covers) but not
// their zone's name, as JSON would.
const (
	snapshotTimeZero = iota
	snapshotTimeUTC
	snapshotTimeOffset
)

func (e *snapshotEncoder) time(t time.Time) {
	if t.IsZero() {
		e.buf = append(e.buf, snapshotTimeZero)
		return
	}
	if _, offset := t.Zone(); offset != 0 {
		e.buf = append(e.buf, snapshotTimeOffset)
		e.varint(int64(offset))
	} else {
		e.buf = append(e.buf, snapshotTimeUTC)
	}
	e.varint(t.Unix())
	e.uvarint(uint64(t.Nanosecond()))
}

// How a node name is written: most are the hostname or the UUID.
const (
	nodeNameLiteral = iota
	nodeNameIsHostname
	nodeNameIsUUID
)

// record writes every field of a record but its cached encoding. A field
// added to machine.State must be added here and in snapshotDecoder.record
// (TestSnapshotKeepsEveryField fails until it is) with a new
// snapshotVersion.
func (e *snapshotEncoder) record(r *record) {
	st := &r.state
	e.buf = append(e.buf, r.key[:]...)
	if canonical := r.key.canonical(); st.UUID == string(canonical[:]) {
		e.bool(false)
	} else {
		e.bool(true)
		e.str(st.UUID)
	}
	e.sym(string(st.Status))
	e.str(st.Hostname)
	switch {
	case st.NodeName != "" && st.NodeName == st.Hostname:
		e.buf = append(e.buf, nodeNameIsHostname)
	case st.NodeName != "" && st.NodeName == st.UUID:
		e.buf = append(e.buf, nodeNameIsUUID)
	default:
		e.buf = append(e.buf, nodeNameLiteral)
		e.str(st.NodeName)
	}
	e.keys = e.keys[:0]
	for k := range st.Labels {
		e.keys = append(e.keys, k)
	}
	slices.Sort(e.keys) // deterministic snapshots
	e.uvarint(uint64(len(e.keys)))
	for _, k := range e.keys {
		e.sym(k)
		e.sym(st.Labels[k])
	}
	e.sym(st.Pool)
	e.varint(int64(st.UpgradeIndex))
	e.bool(st.ControlPlane)
	e.str(st.MAC)
	e.sym(st.EnrollmentTokenID)
	e.time(st.RegisteredAt)
	e.uvarint(st.CurrentRevision)
	e.time(st.CurrentRevisionAt)
	e.uvarint(st.TargetRevision)
	e.sym(string(st.MaintenanceReturn))
	e.bool(st.Failure != nil)
	if f := st.Failure; f != nil {
		e.str(f.Reason)
		e.sym(string(f.During))
		e.sym(f.Step)
	}
	e.bool(st.Deletion != nil)
	if d := st.Deletion; d != nil {
		e.sym(string(d.Policy))
		e.sym(string(d.Phase))
		e.bool(d.Prepared)
		e.sym(string(d.PreviousStatus))
		e.str(d.Reason)
	}
	e.bool(st.Hardware != nil)
	if hw := st.Hardware; hw != nil {
		e.varint(int64(hw.CPUs))
		e.uvarint(hw.RAMBytes)
		e.uvarint(uint64(len(hw.Disks)))
		for _, d := range hw.Disks {
			e.sym(d.Name)
			e.uvarint(d.SizeBytes)
		}
		e.uvarint(uint64(len(hw.NICs)))
		for _, n := range hw.NICs {
			e.sym(n.Name)
			e.str(n.MAC)
		}
	}
	e.time(st.HardwareReportedAt)
	e.bool(st.Reboot.Required)
	e.str(st.Reboot.Reason)
	e.sym(string(st.Connectivity))
	e.time(st.ConnectivitySince)
	e.time(st.LastIPXEBootAt)
	e.time(st.IPXERetryBy)
	e.time(st.LastIgnitionAt)

	e.time(r.created)
	e.time(r.updated)
	e.uvarint(r.version)
	e.time(r.lastSeen)
	e.time(r.boot.At)
	e.time(r.boot.RetryBy)
}

// snapshotDecoder reads what snapshotEncoder wrote. The first error sticks
// and every later read returns zero values, so that record reads straight
// through and is checked once.
type snapshotDecoder struct {
	buf  []byte
	err  error
	syms []string
	strs interner
}

func (d *snapshotDecoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = errs.Internal("read model snapshot: "+format, a...)
	}
}

func (d *snapshotDecoder) truncated() { d.fail("truncated or damaged") }

func (d *snapshotDecoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }
func (d *snapshotDecoder) varint() int64   { return readVarint(d, binary.Varint) }

func readVarint[T uint64 | int64](d *snapshotDecoder, read func([]byte) (T, int)) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.buf)
	if n <= 0 {
		d.truncated()
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *snapshotDecoder) int() int {
	v := d.varint()
	if v < math.MinInt || v > math.MaxInt {
		d.truncated()
		return 0
	}
	return int(v)
}

func (d *snapshotDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.truncated()
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *snapshotDecoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.truncated()
	return false
}

func (d *snapshotDecoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.truncated()
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// count reads a number of items that take at least min bytes each, so that
// a damaged count cannot make the decoder allocate more than the blob holds.
func (d *snapshotDecoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.buf)/min) {
		d.truncated()
		return 0
	}
	return int(n)
}

func (d *snapshotDecoder) str() string { return string(d.bytes(d.uvarint())) }

func (d *snapshotDecoder) sym() string {
	v := d.uvarint()
	switch {
	case v == 0 || d.err != nil:
		return ""
	case v&1 == 1:
		b := d.bytes(v >> 1)
		if d.err != nil {
			return ""
		}
		s, ok := d.strs[string(b)]
		if !ok {
			s = string(b)
			d.strs[s] = s
		}
		d.syms = append(d.syms, s)
		return s
	case v>>1 > uint64(len(d.syms)):
		d.truncated()
		return ""
	}
	return d.syms[v>>1-1]
}

func (d *snapshotDecoder) time() time.Time {
	switch tag := d.byte(); tag {
	case snapshotTimeZero:
		return time.Time{}
	case snapshotTimeUTC:
		sec := d.varint()
		return time.Unix(sec, int64(d.uvarint())).UTC()
	case snapshotTimeOffset:
		offset := d.int()
		sec := d.varint()
		return time.Unix(sec, int64(d.uvarint())).In(time.FixedZone("", offset))
	default:
		d.truncated()
		return time.Time{}
	}
}

func (d *snapshotDecoder) model() (checkpoint uint64, orgs map[string]*orgIndex, err error) {
	if len(d.buf) < len(snapshotMagic)+1 || string(d.buf[:len(snapshotMagic)]) != snapshotMagic {
		if len(d.buf) > 0 && d.buf[0] == '{' {
			return 0, nil, errs.Internal("read model snapshot has version 1 (JSON), this build reads %d", snapshotVersion)
		}
		return 0, nil, errs.Internal("read model snapshot: not a snapshot of this read model")
	}
	if v := d.buf[len(snapshotMagic)]; v != snapshotVersion {
		return 0, nil, errs.Internal("read model snapshot has version %d, this build reads %d", v, snapshotVersion)
	}
	d.buf = d.buf[len(snapshotMagic)+1:]
	checkpoint = d.uvarint()
	orgs = map[string]*orgIndex{}
	for range d.count(2) {
		org := d.strs.get(d.str())
		if d.err == nil && (org == "" || orgs[org] != nil) {
			d.fail("organization %q is empty or appears twice", org)
		}
		o := newOrgIndex()
		orgs[org] = o
		for i := 0; d.bool(); i++ {
			r := d.record()
			if d.err != nil {
				return 0, nil, d.err
			}
			if !r.state.Status.Valid() {
				d.fail("machine %d of %s (%s) has status %q", i, org, r.state.UUID, r.state.Status)
			} else if o.byKey[r.key] != nil {
				d.fail("machine %s appears twice in %s", r.state.UUID, org)
			}
			if d.err != nil {
				return 0, nil, d.err
			}
			o.insert(r)
		}
	}
	if d.err == nil && len(d.buf) > 0 {
		d.fail("%d bytes after the last machine", len(d.buf))
	}
	return checkpoint, orgs, d.err
}

func (d *snapshotDecoder) record() *record {
	r := &record{}
	copy(r.key[:], d.bytes(uint64(len(r.key))))
	st := &r.state
	id := r.key.String()
	if _, err := machine.ParseUUID(id); err != nil && d.err == nil {
		d.fail("machine %s: %v", id, err)
	}
	st.UUID = id
	if d.bool() { // as the events spelled it
		st.UUID = d.str()
		if canonical, err := machine.ParseUUID(st.UUID); err != nil || canonical != id {
			d.fail("machine %s is recorded as %q", id, st.UUID)
		}
	}
	st.Status = machine.Status(d.sym())
	st.Hostname = d.str()
	switch d.byte() {
	case nodeNameIsHostname:
		st.NodeName = st.Hostname
	case nodeNameIsUUID:
		st.NodeName = st.UUID
	case nodeNameLiteral:
		st.NodeName = d.str()
	default:
		d.truncated()
	}
	if n := d.count(2); n > 0 {
		st.Labels = make(map[string]string, n)
		for range n {
			k := d.sym()
			st.Labels[k] = d.sym()
		}
	}
	st.Pool = d.sym()
	st.UpgradeIndex = d.int()
	st.ControlPlane = d.bool()
	st.MAC = d.str()
	st.EnrollmentTokenID = d.sym()
	st.RegisteredAt = d.time()
	st.CurrentRevision = d.uvarint()
	st.CurrentRevisionAt = d.time()
	st.TargetRevision = d.uvarint()
	st.MaintenanceReturn = machine.Status(d.sym())
	if d.bool() {
		st.Failure = &machine.Failure{Reason: d.str(), During: machine.Status(d.sym()), Step: d.sym()}
	}
	if d.bool() {
		st.Deletion = &machine.Deletion{Policy: machine.DeletionPolicy(d.sym()), Phase: machine.DeletionPhase(d.sym()), Prepared: d.bool(),
			PreviousStatus: machine.Status(d.sym()), Reason: d.str()}
	}
	if d.bool() {
		hw := &machine.Hardware{CPUs: d.int(), RAMBytes: d.uvarint()}
		if n := d.count(2); n > 0 {
			hw.Disks = make([]machine.Disk, n)
			for i := range hw.Disks {
				hw.Disks[i] = machine.Disk{Name: d.sym(), SizeBytes: d.uvarint()}
			}
		}
		if n := d.count(2); n > 0 {
			hw.NICs = make([]machine.NIC, n)
			for i := range hw.NICs {
				hw.NICs[i] = machine.NIC{Name: d.sym(), MAC: d.str()}
			}
		}
		st.Hardware = hw
	}
	st.HardwareReportedAt = d.time()
	st.Reboot = machine.Reboot{Required: d.bool(), Reason: d.str()}
	st.Connectivity = machine.Connectivity(d.sym())
	st.ConnectivitySince = d.time()
	st.LastIPXEBootAt = d.time()
	st.IPXERetryBy = d.time()
	st.LastIgnitionAt = d.time()

	r.created = d.time()
	r.updated = d.time()
	r.version = d.uvarint()
	r.lastSeen = d.time()
	r.boot = IPXEBoot{At: d.time(), RetryBy: d.time()}
	return r
}

// hashed is what Hash covers of a record: everything derived from events.
type hashed struct {
	Org       string        `json:"org"`
	State     machine.State `json:"state"`
	CreatedAt int64         `json:"created_at"`
	UpdatedAt int64         `json:"updated_at"`
	Version   uint64        `json:"version"`
}

// copyHashed copies what Hash covers under the read lock, organizations in
// name order and machines in UUID order, so that hashes are deterministic.
// The copies are shallow, which is safe because Apply never changes a
// published map, slice or pointer in place; hashing then happens without
// holding up the projection.
func (m *Model) copyHashed() (uint64, []hashed) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	orgs := make([]string, 0, len(m.orgs))
	n := 0
	for org, o := range m.orgs {
		orgs = append(orgs, org)
		n += len(o.byKey)
	}
	slices.Sort(orgs)
	out := make([]hashed, 0, n)
	for _, org := range orgs {
		m.orgs[org].all.Ascend(func(r *record) bool {
			out = append(out, hashed{Org: org, State: r.state, CreatedAt: r.created.UnixNano(), UpdatedAt: r.updated.UnixNano(), Version: r.version})
			return true
		})
	}
	return m.checkpoint, out
}

// Hash is a digest of the checkpoint and every machine, excluding
// heartbeat times and unrecorded iPXE boots, for checking that two builds (a replay from zero, a
// restore, a replica) reached the same state.
func (m *Model) Hash() [32]byte {
	cp, recs := m.copyHashed()
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], cp)
	h.Write(n[:])
	for _, r := range recs {
		buf, err := json.Marshal(r)
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
