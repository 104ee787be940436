package readmodel

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// The read model keeps each machine's JSON as the registry's API shows it
// (api.Machine), so that a page of machines is answered by concatenating
// bytes instead of encoding a hundred structs on every request.
//
// A record's encoding is made on the first read after the machine changed
// (never while projecting, so replays and rebuilds do not pay for it) and
// dropped by every event that changes the machine (and by a boot that
// changes its last_ipxe_boot_at, see SetIPXEBoot). It leaves out
// last_seen, the last field of api.Machine, which heartbeats change far
// more often than events do; it is appended on each read.

// encoded returns r's cached encoding: the JSON of api.Machine without
// last_seen and without its closing brace. The caller holds the read (or
// write) lock; concurrent readers may both encode, and keep either copy.
func (r *record) encoded(org string) []byte {
	if p := r.enc.Load(); p != nil {
		return *p
	}
	m := wire.Machine(org, r.shown())
	m.CreatedAt, m.UpdatedAt = r.created, r.updated
	b, err := json.Marshal(m)
	if err != nil || len(b) < 2 || b[len(b)-1] != '}' {
		// a State always encodes; keep the answer well-formed regardless
		b = append(append([]byte(`{"org":`), strconv.Quote(org)...), '}')
	}
	b = b[: len(b)-1 : len(b)-1]
	r.enc.Store(&b)
	return b
}

// invalidate drops r's encoding; the caller holds the write lock.
func (r *record) invalidate() { r.enc.Store(nil) }

// appendJSON appends r as json.Marshal(api.Machine) would encode it.
func (r *record) appendJSON(dst []byte, org string) []byte {
	dst = append(dst, r.encoded(org)...)
	if !r.lastSeen.IsZero() {
		dst = append(dst, `,"last_seen":`...)
		dst = appendTime(dst, r.lastSeen)
	}
	return append(dst, '}')
}

// appendTime appends t as time.Time's MarshalJSON does.
func appendTime(dst []byte, t time.Time) []byte {
	if b, err := t.MarshalJSON(); err == nil {
		return append(dst, b...)
	}
	return append(dst, `null`...)
}

// GetJSON returns one machine of org as the registry's get answers it,
// encoded: the JSON of api.MachineReply (the machine and its version).
func (m *Model) GetJSON(org, machineUUID string) ([]byte, error) {
	return m.AppendGetJSON(nil, org, machineUUID)
}

// AppendGetJSON is GetJSON appending to dst.
func (m *Model) AppendGetJSON(dst []byte, org, machineUUID string) ([]byte, error) {
	id, err := machine.ParseUUID(machineUUID)
	if err != nil {
		return dst, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.orgs[org]; o != nil {
		if r := o.byKey[keyOf(id)]; r != nil {
			b := slices.Grow(dst, len(r.encoded(org))+96)
			b = append(b, `{"machine":`...)
			b = r.appendJSON(b, org)
			b = append(b, `,"version":`...)
			b = strconv.AppendUint(b, r.version, 10)
			return append(b, '}'), nil
		}
	}
	return dst, errs.NotFound("machine %s not found in organization %s", id, org)
}

// ListJSON is List, encoded as the registry's list answers it: the JSON of
// api.MachinePage, made of the machines' cached encodings.
func (m *Model) ListJSON(org string, f Filter) ([]byte, error) { return m.AppendListJSON(nil, org, f) }

// AppendListJSON is ListJSON appending to dst.
func (m *Model) AppendListJSON(dst []byte, org string, f Filter) ([]byte, error) {
	q, err := parseFilter(org, f)
	if err != nil {
		return dst, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	found, next := m.find(org, &q)
	size := 32 + len(next)
	for _, r := range found {
		size += len(r.encoded(org)) + 48
	}
	b := slices.Grow(dst, size)
	b = append(b, `{"items":[`...)
	for i, r := range found {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.appendJSON(b, org)
	}
	b = append(b, ']')
	if next != "" { // base64url: nothing to escape
		b = append(b, `,"next":"`...)
		b = append(b, next...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}
