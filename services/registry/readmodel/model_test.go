package readmodel

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/selector"
)

func twoOrgs(t *testing.T) (*Model, []envelope) {
	t.Helper()
	return twoOrgsFrom(t, eventstest.Seed(t, 1))
}

// twoOrgsFrom builds twoOrgs' model from seed: its streams and their
// interleaving use seed, seed+1 and seed+2.
func twoOrgsFrom(t *testing.T, seed uint64) (*Model, []envelope) {
	t.Helper()
	var seqA, seqB uint64
	a, b := fleet("acme", 300, seed, &seqA), fleet("globex", 200, seed+1, &seqB)
	// Interleave the two organizations as the shared log would, keeping
	// each one's order, and number the result as stream sequences.
	r := rand.New(rand.NewPCG(seed+2, 3))
	var evs []envelope
	for len(a)+len(b) > 0 {
		if len(b) == 0 || (len(a) > 0 && r.IntN(2) == 0) {
			evs, a = append(evs, a[0]), a[1:]
		} else {
			evs, b = append(evs, b[0]), b[1:]
		}
		evs[len(evs)-1].seq = uint64(len(evs))
	}
	m := New()
	load(m, evs)
	return m, evs
}

func TestApplyAndGet(t *testing.T) {
	m := New()
	id := "4C4C4544-0042-3510-8052-B4C04F4E3132"
	at := base.In(time.FixedZone("CEST", 2*3600))
	m.Apply(1, "acme", id, at, machine.Registered{UUID: strings.ToLower(id), MAC: "52:54:00:00:00:01", EnrollmentTokenID: "aaaaaaaaaaaaaaaa", BootedAt: base})
	m.Apply(2, "acme", id, at.Add(time.Second), &machine.AssignedToPool{Pool: "p1"})
	got, err := m.Get("acme", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Org != "acme" || got.Status != machine.StatusPending || got.Pool != "p1" || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(base.Add(time.Second)) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("%+v", got)
	}
	if m.Checkpoint() != 2 {
		t.Fatal(m.Checkpoint())
	}
	// Fields replaced on the returned machine do not touch the model.
	got.Labels = map[string]string{"x": "y"}
	if again, _ := m.Get("acme", id); again.Labels != nil {
		t.Fatal("Get must return a copy of the record")
	}
	// Other events only move the checkpoint.
	m.Apply(3, "acme", "", base, struct{}{})
	m.Apply(4, "acme", "not-a-uuid", base, machine.HostnameChanged{Hostname: "x"})
	m.Apply(5, "acme", "5c4c4544-0042-3510-8052-b4c04f4e3132", base, machine.HostnameChanged{Hostname: "ghost"})
	if m.Checkpoint() != 5 {
		t.Fatal(m.Checkpoint())
	}
	if _, err := m.Get("acme", "5c4c4544-0042-3510-8052-b4c04f4e3132"); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("an update for an unknown machine must not create it: %v", err)
	}
	if _, err := m.Get("acme", "nope"); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("bad uuid: %v", err)
	}
	// Deletion removes it from every index.
	m.Apply(6, "acme", id, base, machine.Deleted{Policy: machine.DeletionForced})
	if _, err := m.Get("acme", id); !errs.Is(err, errs.KindNotFound) {
		t.Fatal(err)
	}
	for _, f := range []Filter{{}, {Pool: "p1"}, {Status: machine.StatusPending}} {
		if p, _ := m.List("acme", f); len(p.Items) != 0 {
			t.Fatalf("deleted machine still listed with %+v", f)
		}
	}
}

// Machines returned by queries share maps and slices with the model; that
// is only safe if the model never changes them in place afterwards.
func TestReturnedMachinesNeverChange(t *testing.T) {
	m, evs := twoOrgs(t)
	e := evs[0]
	before, _ := m.Get(e.org, e.uuid)
	frozen := before.Clone()
	seq := m.Checkpoint()
	for _, ev := range []any{
		machine.LabelsChanged{Labels: map[string]string{"rack": "r00"}},
		machine.HardwareReported{At: base.Add(time.Hour), Hardware: machine.Hardware{CPUs: 1, RAMBytes: 1, Disks: []machine.Disk{{Name: "sda"}}}},
		machine.Failed{Reason: "x", During: machine.StatusProvisioning},
		machine.DeletionStarted{Policy: machine.DeletionGraceful},
		machine.DeletionFailed{Reason: "y"},
		machine.DeletionAborting{},
	} {
		seq++
		m.Apply(seq, e.org, e.uuid, base, ev)
	}
	if !reflect.DeepEqual(before, frozen) {
		t.Fatal("the model changed a machine it had handed out")
	}
	after, _ := m.Get(e.org, e.uuid)
	if after.Labels["rack"] != "r00" || after.Deletion == nil {
		t.Fatalf("events were not applied: %+v", after)
	}
}

func TestRedeliveryKeepsHash(t *testing.T) {
	m, evs := twoOrgs(t)
	h := m.Hash()
	// Redeliver a window of old events, and the last one again.
	for _, e := range evs[100:300] {
		m.Apply(e.seq, e.org, e.uuid, e.at.Add(time.Hour), e.event)
	}
	last := evs[len(evs)-1]
	m.Apply(last.seq, last.org, last.uuid, last.at, machine.Deleted{})
	if m.Hash() != h {
		t.Fatal("redelivered events changed the model")
	}
	// A rebuild from zero reaches the same hash.
	again := New()
	load(again, evs)
	if again.Hash() != h {
		t.Fatal("rebuild differs")
	}
	// And a real change changes it.
	m.Apply(last.seq+1, last.org, last.uuid, last.at, machine.HostnameChanged{Hostname: "renamed"})
	if m.Hash() == h {
		t.Fatal("hash ignores changes")
	}
}

func TestLastSeenIsNotHashed(t *testing.T) {
	m, evs := twoOrgs(t)
	h := m.Hash()
	e := evs[0]
	m.SetLastSeen(e.org, e.uuid, base.Add(time.Hour))
	m.SetLastSeen(e.org, e.uuid, base) // older: ignored
	got, _ := m.Get(e.org, e.uuid)
	if !got.LastSeen.Equal(base.Add(time.Hour)) {
		t.Fatalf("last seen %v", got.LastSeen)
	}
	if m.Hash() != h || m.Checkpoint() != evs[len(evs)-1].seq {
		t.Fatal("heartbeats must not change the hash or the checkpoint")
	}
}

func TestSnapshotRestore(t *testing.T) {
	seed := eventstest.Seed(t, 1)
	m, evs := twoOrgsFrom(t, seed)
	m.SetLastSeen(evs[0].org, evs[0].uuid, base.Add(time.Hour))
	blob, checkpoint := m.Snapshot(nil)
	if checkpoint != m.Checkpoint() {
		t.Fatalf("snapshot covers %d, the model is at %d", checkpoint, m.Checkpoint())
	}
	r := New()
	if err := r.Restore(blob); err != nil {
		t.Fatal(err)
	}
	if r.Hash() != m.Hash() || r.Checkpoint() != m.Checkpoint() {
		t.Fatal("restore changed the state")
	}
	if again, _ := r.Snapshot(nil); string(again) != string(blob) {
		t.Fatal("snapshots are not deterministic")
	}
	for _, org := range []string{"acme", "globex"} {
		a, _ := m.List(org, Filter{Limit: MaxLimit})
		b, _ := r.List(org, Filter{Limit: MaxLimit})
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s lists differ after restore", org)
		}
	}
	got, _ := r.Get(evs[0].org, evs[0].uuid)
	if !got.LastSeen.Equal(base.Add(time.Hour)) {
		t.Fatal("last seen is part of the snapshot")
	}
	// Both continue identically.
	var seq = m.Checkpoint()
	more := fleet("initech", 50, seed+8, &seq)
	load(m, more)
	load(r, more)
	if r.Hash() != m.Hash() {
		t.Fatal("restored model diverges on new events")
	}
	// An empty model round-trips too.
	empty, _ := New().Snapshot(nil)
	e := New()
	if err := e.Restore(empty); err != nil || e.Hash() != New().Hash() {
		t.Fatalf("empty snapshot %q: %v", empty, err)
	}
	// A bad blob leaves the model alone: another version, anything cut
	// short, anything after the end, or not a snapshot at all.
	h := r.Hash()
	other := slices.Clone(blob)
	other[len(snapshotMagic)]++
	bad := [][]byte{nil, []byte("{"), []byte(`{"version":1,"machines":[]}`), other, append(slices.Clone(blob), 0)}
	for n := 0; n < len(blob); n += 1 + len(blob)/300 {
		bad = append(bad, blob[:n])
	}
	for _, b := range bad {
		if err := r.Restore(b); err == nil {
			t.Fatalf("restore accepted %d bytes: %.40q", len(b), b)
		}
	}
	if r.Hash() != h {
		t.Fatal("failed restore changed the model")
	}
}

// reference filters the whole org by brute force.
func reference(t *testing.T, m *Model, org string, f Filter) []string {
	t.Helper()
	sel, err := selector.Parse(f.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.orgs[org]; o != nil {
		for _, r := range o.byKey {
			if (f.Pool == "" || r.state.Pool == f.Pool) && (f.Status == "" || r.state.Status == f.Status) && sel.Matches(r.state.Labels) {
				out = append(out, r.state.UUID)
			}
		}
	}
	slices.Sort(out)
	return out
}

func walk(t *testing.T, m *Model, org string, f Filter) []string {
	t.Helper()
	var out []string
	var prev string
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			t.Fatal("paging does not end")
		}
		p, err := m.List(org, f)
		if err != nil {
			t.Fatal(err)
		}
		if limit := cmp.Or(f.Limit, DefaultLimit); len(p.Items) > limit {
			t.Fatalf("page of %d exceeds limit %d", len(p.Items), limit)
		}
		for _, it := range p.Items {
			if it.Org != org {
				t.Fatalf("listing %s returned a machine of %s", org, it.Org)
			}
			if it.UUID <= prev {
				t.Fatalf("order broken or duplicate: %s after %s", it.UUID, prev)
			}
			prev = it.UUID
			out = append(out, it.UUID)
		}
		if p.Next == "" {
			return out
		}
		if p.Next == f.Cursor {
			t.Fatal("paging makes no progress")
		}
		f.Cursor = p.Next
	}
}

func TestFiltersAndPagination(t *testing.T) {
	m, _ := twoOrgs(t)
	filters := []Filter{
		{},
		{Pool: "pool-03"},
		{Status: machine.StatusReady},
		{Status: machine.StatusFailed},
		{Status: machine.StatusReadyUnassigned},
		{Pool: "pool-07", Status: machine.StatusReady},
		{Selector: "env=prod"},
		{Selector: "env=prod,rack in (r01,r02,r03),!gpu,tier!=t1"},
		{Selector: "gpu"},
		{Pool: "pool-01", Status: machine.StatusMaintenance, Selector: "env in (prod,staging)"},
		{Pool: "no-such-pool"},
		{Selector: "rack=r99"},
		{Selector: "rack in (r01,r02,r03,r99),tier!=t1"},
		{Selector: "env in (prod,dev),gpu"},
		{Selector: "!env,rack"},
	}
	// Small scan budgets force partial and empty pages, also for "in"
	// selectors that walk several label indexes at once.
	for _, budget := range []int{0, 1, 2, 7, 60} {
		m.scanBudget = budget
		for _, org := range []string{"acme", "globex", "nobody"} {
			for _, f := range filters {
				want := reference(t, m, org, f)
				for _, limit := range []int{1, 7, 100, 0} {
					f.Limit = limit
					got := walk(t, m, org, f)
					if !slices.Equal(got, want) {
						t.Fatalf("budget %d, %s %+v: got %d machines, want %d", budget, org, f, len(got), len(want))
					}
				}
			}
		}
	}
	// A call that runs out of budget says so with an empty page and a cursor.
	m.scanBudget = 5
	if p, err := m.List("acme", Filter{Selector: "!env,rack"}); err != nil || len(p.Items) != 0 || p.Next == "" {
		t.Fatalf("budgeted scan: %d items, next %q, %v", len(p.Items), p.Next, err)
	}
	m.scanBudget = 0
	if n := len(reference(t, m, "acme", Filter{Status: machine.StatusReady})); n < 100 {
		t.Fatalf("fleet too small to exercise paging: %d", n)
	}
}

func TestIsolation(t *testing.T) {
	m := New()
	// The same UUID in two organizations is two machines.
	id := uuidFor("x", 1)
	m.Apply(1, "acme", id, base, machine.Preregistered{UUID: id, Hostname: "acme-1", Pool: "shared"})
	m.Apply(2, "globex", id, base, machine.Preregistered{UUID: id, Hostname: "globex-1", Pool: "shared"})
	m.Apply(3, "globex", uuidFor("x", 2), base, machine.Preregistered{UUID: uuidFor("x", 2), Pool: "shared"})
	m.SetLastSeen("globex", id, base.Add(time.Hour))
	a, _ := m.Get("acme", id)
	g, _ := m.Get("globex", id)
	if a.Hostname != "acme-1" || g.Hostname != "globex-1" || !a.LastSeen.IsZero() || g.LastSeen.IsZero() {
		t.Fatal("organizations share a machine")
	}
	if _, err := m.Get("acme", uuidFor("x", 2)); !errs.Is(err, errs.KindNotFound) {
		t.Fatal("globex's machine visible in acme")
	}
	p, _ := m.List("acme", Filter{Pool: "shared"})
	if len(p.Items) != 1 || p.Items[0].Org != "acme" {
		t.Fatalf("%+v", p)
	}
	// A cursor from one organization does not work in another.
	p, _ = m.List("globex", Filter{Limit: 1})
	if _, err := m.List("acme", Filter{Limit: 1, Cursor: p.Next}); !isCursorError(err) {
		t.Fatalf("cross-org cursor: %v", err)
	}
	m.Apply(4, "globex", id, base, machine.Deleted{})
	if _, err := m.Get("acme", id); err != nil {
		t.Fatal("deleting globex's machine deleted acme's")
	}
	if _, err := m.List("", Filter{}); !errs.Is(err, errs.KindValidation) {
		t.Fatal("org is required")
	}
}

func isCursorError(err error) bool {
	e := errs.As(err)
	return e != nil && e.Kind == errs.KindValidation && len(e.Fields) == 1 && e.Fields[0].Field == "cursor"
}

func TestBadFilters(t *testing.T) {
	m, _ := twoOrgs(t)
	_, err := m.List("acme", Filter{Status: "sleeping", Selector: "a in (", Limit: -1, Cursor: "!!"})
	var got []string
	for _, f := range errs.As(err).Fields {
		got = append(got, f.Field)
	}
	if !reflect.DeepEqual(got, []string{"status", "limit", "selector", "cursor"}) {
		t.Fatalf("fields %v (%v)", got, err)
	}
	p, _ := m.List("acme", Filter{Pool: "pool-01", Limit: 2})
	valid := p.Next
	cases := map[string]Filter{
		"other pool":      {Pool: "pool-02", Cursor: valid},
		"other selector":  {Pool: "pool-01", Selector: "env=prod", Cursor: valid},
		"truncated":       {Pool: "pool-01", Cursor: valid[:10]},
		"padded":          {Pool: "pool-01", Cursor: valid + "=="},
		"wrong version":   {Pool: "pool-01", Cursor: "B" + valid[1:]},
		"not base64":      {Pool: "pool-01", Cursor: "∞"},
		"forged position": {Pool: "pool-01", Cursor: encodeCursor(key{0xff}, fingerprint("acme", "pool-01", "", ""))},
	}
	for name, f := range cases {
		_, err := m.List("acme", f)
		if name == "forged position" {
			if err != nil {
				t.Errorf("%s: a well-formed cursor is a position, got %v", name, err)
			}
			continue
		}
		if !isCursorError(err) {
			t.Errorf("%s: want a cursor field error, got %v", name, err)
		}
	}
	// Equivalent selectors share cursors (the fingerprint uses the canonical form).
	p, _ = m.List("acme", Filter{Selector: "tier!=t1, env=prod", Limit: 1})
	if _, err := m.List("acme", Filter{Selector: "env=prod,tier!=t1", Cursor: p.Next}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := New()
	var seq uint64
	evs := fleet("acme", 300, eventstest.Seed(t, 5), &seq)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		load(m, evs)
	}()
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				_, _ = m.List("acme", Filter{Status: machine.StatusReady, Selector: "env=prod", Limit: 10})
				_, _ = m.Get("acme", uuidFor("acme", i))
				m.SetLastSeen("acme", uuidFor("acme", i), base.Add(time.Duration(g)*time.Second))
				_ = m.Checkpoint()
				if i%50 == 0 {
					_ = m.Hash()
					_, _ = m.Snapshot(nil)
				}
			}
		}()
	}
	wg.Wait()
	ref := New()
	load(ref, evs)
	if ref.Hash() != m.Hash() {
		t.Fatal("concurrent readers changed the outcome")
	}
}

func TestZeroModelIsUsable(t *testing.T) {
	var m Model
	if p, err := m.List("acme", Filter{}); err != nil || len(p.Items) != 0 {
		t.Fatal(p, err)
	}
	id := uuidFor("acme", 1)
	m.Apply(1, "acme", id, base, &machine.Registered{UUID: id, MAC: "52:54:00:00:00:01", EnrollmentTokenID: "aaaaaaaaaaaaaaaa", BootedAt: base})
	m.Apply(2, "acme", id, base, (*machine.HostnameChanged)(nil))
	if got, err := m.Get("acme", id); err != nil || got.Status != machine.StatusReadyUnassigned {
		t.Fatal(got, err)
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for i := range 100 {
		id := uuidFor(fmt.Sprint(i), i*7919)
		if got := keyOf(id).String(); got != id {
			t.Fatalf("%s -> %s", id, got)
		}
	}
}

func FuzzListCursor(f *testing.F) {
	m := New()
	var seq uint64
	load(m, fleet("acme", 50, 1, &seq))
	p, _ := m.List("acme", Filter{Limit: 5})
	for _, s := range []string{"", p.Next, "AAAA", "!!", p.Next[:5], strings.Repeat("A", 34)} {
		f.Add(s, "")
	}
	f.Add(p.Next, "env=prod")
	f.Fuzz(func(t *testing.T, cursor, sel string) {
		page, err := m.List("acme", Filter{Cursor: cursor, Selector: sel, Limit: 5})
		if err != nil {
			if errs.KindOf(err) != errs.KindValidation {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(page.Items) > 5 {
			t.Fatal("limit exceeded")
		}
	})
}
