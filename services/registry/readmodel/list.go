package readmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"slices"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/selector"
)

const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Filter selects machines of one organization. Empty fields match all.
type Filter struct {
	Pool     string
	Status   machine.Status
	Selector string // Kubernetes label selector syntax
	Cursor   string // Page.Next of the previous page; empty for the first
	Limit    int    // 0 means DefaultLimit
}

// Page is one page of machines in UUID order.
type Page struct {
	Items []Machine
	// Next continues the listing with the same filter; empty on the last
	// page. As with Kubernetes list+continue, a page may hold fewer than
	// Limit items, even none, while Next is set: each call examines at most
	// ScanBudget machines so that no filter can make a call slow.
	Next string
}

// ScanBudget bounds the machines one List call examines (about 5 ms of
// work on one core). A selector that no index narrows (only !, != or
// notin requirements) and that matches few machines would otherwise scan
// the whole organization on every call.
const ScanBudget = 20_000

// query is a validated Filter.
type query struct {
	pool   string
	status machine.Status
	sel    selector.Selector
	after  *key
	limit  int
	fp     [fpLen]byte
}

func parseFilter(org string, f Filter) (query, error) {
	var fields errs.Fields
	q := query{pool: f.Pool, status: f.Status, limit: f.Limit}
	if org == "" {
		fields.Add("org", "is required")
	}
	if f.Status != "" && !f.Status.Valid() {
		fields.Add("status", "must be one of the machine statuses (ready, pending, maintenance, …), got %q", f.Status)
	}
	switch {
	case f.Limit == 0:
		q.limit = DefaultLimit
	case f.Limit < 0 || f.Limit > MaxLimit:
		fields.Add("limit", "must be between 1 and %d, got %d", MaxLimit, f.Limit)
	}
	sel, err := selector.Parse(f.Selector)
	fields.Merge("", err)
	q.sel = sel
	q.fp = fingerprint(org, f.Pool, f.Status, sel.String())
	if f.Cursor != "" {
		k, err := decodeCursor(f.Cursor, q.fp)
		fields.Merge("", err)
		q.after = &k
	}
	return q, fields.Err()
}

func (q *query) matches(r *record) bool {
	return (q.pool == "" || r.state.Pool == q.pool) &&
		(q.status == "" || r.state.Status == q.status) &&
		q.sel.Matches(r.state.Labels)
}

// List returns one page of org's machines that match f, in UUID order.
// Bad filters (unknown status, invalid selector, a cursor that is garbled or
// was issued for another filter) are validation errors naming the field.
func (m *Model) List(org string, f Filter) (Page, error) {
	q, err := parseFilter(org, f)
	if err != nil {
		return Page{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	found, next := m.find(org, &q)
	page := Page{Items: make([]Machine, len(found)), Next: next}
	for i, r := range found {
		page.Items[i] = r.view(org)
	}
	return page, nil
}

// find returns the records of one page of q, and the cursor of the next
// page (empty on the last). The caller holds the read lock.
func (m *Model) find(org string, q *query) ([]*record, string) {
	o := m.orgs[org]
	if o == nil {
		return nil, ""
	}
	// The source is a set of trees whose union holds every match (one
	// tree, or one per value of "label in (a,b)"); every record taken from
	// it is still checked against the whole filter.
	trees := o.plan(q)
	var found []*record
	var horizon *key // everything up to here was examined in every tree; nil: all of it
	budget := m.scanBudget
	if budget <= 0 {
		budget = ScanBudget
	}
	share := max(1, budget/max(1, len(trees)))
	for _, t := range trees {
		matches, reach := q.collect(t, share)
		found = append(found, matches...)
		if reach != nil && (horizon == nil || bytes.Compare(reach[:], horizon[:]) < 0) {
			horizon = reach
		}
	}
	if len(trees) > 1 {
		// The trees are disjoint (a label has one value): no duplicates.
		slices.SortFunc(found, func(a, b *record) int { return bytes.Compare(a.key[:], b.key[:]) })
	}
	if horizon != nil {
		// Beyond the horizon some tree was not examined, so matches there
		// may be missing; leave them to the next call.
		n := 0
		for n < len(found) && bytes.Compare(found[n].key[:], horizon[:]) <= 0 {
			n++
		}
		found = found[:n]
	}
	switch {
	case len(found) > q.limit:
		return found[:q.limit], encodeCursor(found[q.limit-1].key, q.fp)
	case horizon != nil:
		return found, encodeCursor(*horizon, q.fp)
	}
	return found, ""
}

// plan picks the smallest candidate set among the organization's machines,
// its pool, its status, and the label values the selector pins. An empty
// result means nothing can match.
func (o *orgIndex) plan(q *query) []*tree {
	best, size := []*tree{o.all}, o.all.Len()
	consider := func(ts []*tree) {
		n := 0
		for _, t := range ts {
			n += t.Len()
		}
		if n < size {
			best, size = ts, n
		}
	}
	one := func(t *tree) []*tree {
		if t == nil {
			return nil
		}
		return []*tree{t}
	}
	if q.pool != "" {
		consider(one(o.byPool[q.pool]))
	}
	if q.status != "" {
		consider(one(o.byStatus[q.status]))
	}
	for _, pin := range q.sel.Pins() {
		var ts []*tree
		for _, v := range pin.Values {
			if t := o.byLabel[label{pin.Key, v}]; t != nil {
				ts = append(ts, t)
			}
		}
		consider(ts)
	}
	return best
}

// collect walks t from the cursor and returns its matches, stopping after
// limit+1 of them or after budget records. reach is the last key it
// examined when it stopped early, nil when it reached the end of t.
func (q *query) collect(t *tree, budget int) (matches []*record, reach *key) {
	var last key
	stopped := false
	visit := func(r *record) bool {
		if q.after != nil && r.key == *q.after {
			return true
		}
		if budget == 0 || len(matches) > q.limit {
			stopped = true
			return false
		}
		budget--
		last = r.key
		if q.matches(r) {
			matches = append(matches, r)
		}
		return true
	}
	if q.after != nil {
		t.AscendGreaterOrEqual(&record{key: *q.after}, visit)
	} else {
		t.Ascend(visit)
	}
	if stopped {
		return matches, &last
	}
	return matches, nil
}

// A cursor is base64url(version | last UUID | fingerprint of the query).
// The fingerprint makes a cursor from another filter or organization a
// field error rather than a silently wrong page. It is not a secret: a
// forged cursor can only move the starting point within the caller's own
// query, which reveals nothing the caller could not list anyway.
const (
	cursorVersion = 1
	fpLen         = 8
	cursorLen     = 1 + len(key{}) + fpLen
)

func fingerprint(org, pool string, status machine.Status, sel string) (fp [fpLen]byte) {
	h := sha256.New()
	for _, s := range []string{org, pool, string(status), sel} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	copy(fp[:], h.Sum(nil))
	return fp
}

func encodeCursor(k key, fp [fpLen]byte) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	copy(b[1:], k[:])
	copy(b[1+len(k):], fp[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeCursor(s string, fp [fpLen]byte) (key, error) {
	var k key
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return k, errs.Invalid("cursor", "is not a cursor returned by this listing")
	}
	copy(k[:], b[1:])
	if [fpLen]byte(b[1+len(k):]) != fp {
		return k, errs.Invalid("cursor", "was returned for a different filter; keep org, pool, status and selector the same while paging")
	}
	return k, nil
}
