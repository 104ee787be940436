package readmodel

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// apiView is what the registry answered before the read model kept
// encodings: its machines converted to api.Machine.
func apiView(m Machine) api.Machine {
	out := wire.Machine(m.Org, m.Shown())
	out.CreatedAt, out.UpdatedAt, out.LastSeen = m.CreatedAt, m.UpdatedAt, m.LastSeen
	return out
}

// wantPage is json.Marshal of the page List returns, as api.MachinePage.
func wantPage(t *testing.T, m *Model, org string, f Filter) (string, string) {
	t.Helper()
	p, err := m.List(org, f)
	if err != nil {
		t.Fatal(err)
	}
	out := api.MachinePage{Items: make([]api.Machine, len(p.Items)), Next: p.Next}
	for i, x := range p.Items {
		out.Items[i] = apiView(x)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), p.Next
}

func wantGet(t *testing.T, m *Model, org, id string) string {
	t.Helper()
	x, err := m.Get(org, id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(api.MachineReply{Machine: apiView(x), Version: x.Version})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The encoded answers are byte for byte what encoding the structs gives,
// for every filter and page, with and without heartbeats, and follow
// every change.
func TestEncodedAnswersMatchTheStructs(t *testing.T) {
	m, evs := twoOrgs(t)
	for i := range 40 {
		m.SetLastSeen("acme", uuidFor("acme", i), base.Add(time.Duration(i)*time.Millisecond+time.Nanosecond))
	}
	m.scanBudget = 97 // partial pages too
	for _, f := range []Filter{
		{}, {Limit: 7}, {Pool: "pool-01", Limit: 5}, {Status: machine.StatusReady, Selector: "env in (prod,staging),!gpu", Limit: 3},
		{Selector: "rack=r99"}, {Selector: "!env,rack", Limit: 2},
	} {
		for page := 0; ; page++ {
			want, next := wantPage(t, m, "acme", f)
			got, err := m.ListJSON("acme", f)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("%+v page %d:\n got %s\nwant %s", f, page, got, want)
			}
			if next == "" || page > 200 {
				break
			}
			f.Cursor = next
		}
	}
	// another organization, and one that has no machines
	if got, _ := m.ListJSON("nobody", Filter{}); string(got) != `{"items":[]}` {
		t.Fatalf("empty org: %s", got)
	}
	want, _ := wantPage(t, m, "globex", Filter{Limit: 50})
	if got, _ := m.ListJSON("globex", Filter{Limit: 50}); string(got) != want {
		t.Fatalf("globex:\n got %s\nwant %s", got, want)
	}
	// bad filters are the same field errors as List's
	if _, err := m.ListJSON("acme", Filter{Status: "sideways", Limit: -1}); !errs.Is(err, errs.KindValidation) || len(errs.As(err).Fields) != 2 {
		t.Fatalf("bad filter: %v", err)
	}

	e := evs[len(evs)-1]
	id := uuidFor(e.org, 3)
	check := func(what string) {
		t.Helper()
		got, err := m.GetJSON(e.org, id)
		if want := wantGet(t, m, e.org, id); err != nil || string(got) != want {
			t.Fatalf("%s:\n got %s %v\nwant %s", what, got, err, want)
		}
		var page api.MachinePage
		raw, _ := m.ListJSON(e.org, Filter{Limit: MaxLimit})
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatal(err)
		}
		x, _ := m.Get(e.org, id)
		for _, it := range page.Items {
			if it.UUID == id && (it.Hostname != x.Hostname || !it.LastSeen.Equal(x.LastSeen) || string(it.Status) != string(x.Status)) {
				t.Fatalf("%s: listed as %+v, is %+v", what, it, x)
			}
		}
	}
	check("as loaded")
	seq := m.Checkpoint()
	for _, ev := range []any{
		machine.HostnameChanged{Hostname: `w<3>&"q"`},
		machine.LabelsChanged{Labels: map[string]string{"rack": "r00", "z": "ü"}},
		machine.HardwareReported{At: base.Add(time.Hour), Hardware: machine.Hardware{CPUs: 2, RAMBytes: 1 << 30, Disks: []machine.Disk{{Name: "sda"}}}},
	} {
		seq++
		m.Apply(seq, e.org, id, base.Add(time.Duration(seq)*time.Second), ev)
		check("after " + ev.(machine.Event).EventType())
	}
	m.SetLastSeen(e.org, id, base.Add(48*time.Hour))
	check("after a heartbeat")
	m.SetIPXEBoot(e.org, id, base.Add(72*time.Hour), base.Add(72*time.Hour+5*time.Minute))
	check("after an iPXE boot that the log does not hold")

	if _, err := m.GetJSON(e.org, uuidFor("nobody", 1)); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("missing machine: %v", err)
	}
	if _, err := m.GetJSON(e.org, "nope"); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("bad uuid: %v", err)
	}
	m.Apply(seq+1, e.org, id, base, machine.Deleted{Policy: machine.DeletionForced})
	if _, err := m.GetJSON(e.org, id); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("deleted machine: %v", err)
	}
}

// Readers encode concurrently with each other and with the projection.
func TestEncodedConcurrentUse(t *testing.T) {
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
				if b, err := m.ListJSON("acme", Filter{Status: machine.StatusReady, Limit: 10}); err != nil || !json.Valid(b) {
					t.Errorf("list: %s %v", b, err)
					return
				}
				if b, err := m.GetJSON("acme", uuidFor("acme", i)); err == nil && !json.Valid(b) {
					t.Errorf("get: %s", b)
					return
				}
				m.SetLastSeen("acme", uuidFor("acme", i), base.Add(time.Duration(g)*time.Second))
			}
		}()
	}
	wg.Wait()
	want, _ := wantPage(t, m, "acme", Filter{Limit: MaxLimit})
	if got, _ := m.ListJSON("acme", Filter{Limit: MaxLimit}); string(got) != want {
		t.Fatal("the encodings drifted from the machines")
	}
}

// The Append forms keep what dst held, also on errors.
func TestAppendEncoded(t *testing.T) {
	m, evs := twoOrgs(t)
	e := evs[0]
	want, _ := m.ListJSON(e.org, Filter{Limit: 5})
	got, err := m.AppendListJSON([]byte("head:"), e.org, Filter{Limit: 5})
	if err != nil || string(got) != "head:"+string(want) {
		t.Fatalf("AppendListJSON: %s %v", got, err)
	}
	if got, err := m.AppendListJSON([]byte("head:"), e.org, Filter{Limit: -1}); err == nil || string(got) != "head:" {
		t.Fatalf("AppendListJSON refused: %s %v", got, err)
	}
	one, _ := m.GetJSON(e.org, e.uuid)
	if got, err := m.AppendGetJSON([]byte("x"), e.org, e.uuid); err != nil || string(got) != "x"+string(one) {
		t.Fatalf("AppendGetJSON: %s %v", got, err)
	}
	if got, err := m.AppendGetJSON([]byte("x"), e.org, "nope"); err == nil || string(got) != "x" {
		t.Fatalf("AppendGetJSON refused: %s %v", got, err)
	}
}

// An iPXE boot that the log does not hold (machine.IPXEBootDue) shows in
// every answer, but commands decide on the fold of the events, and the
// hash, which proves rebuilds equal, ignores it.
func TestUnrecordedIPXEBootsShowButAreNotState(t *testing.T) {
	m, evs := twoOrgs(t)
	e := evs[len(evs)-1]
	id := uuidFor(e.org, 5)
	before, _ := m.Get(e.org, id)
	hash := m.Hash()
	at, retryBy := base.Add(96*time.Hour), base.Add(96*time.Hour+4*time.Minute)
	m.SetIPXEBoot(e.org, id, at, retryBy)
	m.SetIPXEBoot(e.org, id, at.Add(-time.Hour), base) // older: ignored
	got, _ := m.Get(e.org, id)
	if !got.State.LastIPXEBootAt.Equal(before.State.LastIPXEBootAt) || !got.Boot.At.Equal(at) {
		t.Fatalf("the state must stay the fold of the events: %v, boot %+v", got.State.LastIPXEBootAt, got.Boot)
	}
	if s := got.Shown(); !s.LastIPXEBootAt.Equal(at) || !s.IPXERetryBy.Equal(retryBy) {
		t.Fatalf("shown: %v %v", s.LastIPXEBootAt, s.IPXERetryBy)
	}
	var reply api.MachineReply
	raw, _ := m.GetJSON(e.org, id)
	if err := json.Unmarshal(raw, &reply); err != nil || !reply.Machine.LastIPXEBootAt.Equal(at) || !reply.Machine.IPXERetryBy.Equal(retryBy) {
		t.Fatalf("get answers %s (%v)", raw, err)
	}
	if m.Hash() != hash {
		t.Fatal("an unrecorded boot changed the hash")
	}
	// a snapshot keeps it
	snap, _ := m.Snapshot(nil)
	r := New()
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if x, _ := r.Get(e.org, id); !x.Boot.At.Equal(at) || !x.Boot.RetryBy.Equal(retryBy) {
		t.Fatalf("restored boot %+v", x.Boot)
	}
	// a recorded boot later than it shows as the log has it
	seq := m.Checkpoint() + 1
	m.Apply(seq, e.org, id, at, machine.IPXEBooted{At: at.Add(time.Minute)})
	if x, _ := m.Get(e.org, id); !x.Shown().LastIPXEBootAt.Equal(at.Add(time.Minute)) || !x.Shown().IPXERetryBy.Equal(x.State.IPXERetryBy) {
		t.Fatalf("after a recorded boot: %+v", x.Shown())
	}
}
