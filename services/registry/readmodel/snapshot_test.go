package readmodel

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// setEveryField gives every exported field reachable from v a distinct
// non-zero value, and fails on a kind it does not know, so that a new
// field of machine.State cannot go unnoticed.
func setEveryField(t *testing.T, v reflect.Value, path string, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.ToLower(path) + "-" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n) << 33) // more than 32 bits
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		setEveryField(t, v.Elem(), path, n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			setEveryField(t, v.Index(i), path, n)
		}
	case reflect.Map:
		if v.Type() != reflect.TypeFor[map[string]string]() {
			t.Fatalf("%s: setEveryField knows no %s; teach it, and the snapshot", path, v.Type())
		}
		v.Set(reflect.ValueOf(map[string]string{path + "/a": "1", path + "/b": "2"}))
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(base.Add(time.Duration(*n)*time.Hour + time.Duration(*n))))
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				setEveryField(t, v.Field(i), path+"."+f.Name, n)
			}
		}
	default:
		t.Fatalf("%s: setEveryField knows no %s; teach it, and the snapshot", path, v.Kind())
	}
}

// TestSnapshotKeepsEveryField restores machines whose every field is set,
// and checks that nothing was lost: a field added to machine.State fails
// here until the snapshot writes it.
func TestSnapshotKeepsEveryField(t *testing.T) {
	m := New()
	m.checkpoint = 1 << 40
	o := newOrgIndex()
	m.orgs["acme"] = o
	n := 0
	for i, spell := range []func(st *machine.State){
		func(st *machine.State) {}, // a node name of its own
		func(st *machine.State) { st.NodeName = st.Hostname },
		func(st *machine.State) { st.NodeName = st.UUID; st.UUID = strings.ToUpper(st.UUID) }, // as an event may spell it
	} {
		r := &record{}
		setEveryField(t, reflect.ValueOf(&r.state).Elem(), "State", &n)
		r.state.UUID = uuidFor("acme", i)
		r.state.Status = machine.StatusReady
		spell(&r.state)
		id, err := machine.ParseUUID(r.state.UUID)
		if err != nil {
			t.Fatal(err)
		}
		r.key = keyOf(id)
		r.created, r.updated, r.version = base.Add(time.Duration(i)), base.Add(time.Hour), uint64(i+1)
		r.lastSeen = base.Add(2 * time.Hour)
		r.boot = IPXEBoot{At: base.Add(3 * time.Hour), RetryBy: base.Add(4 * time.Hour)}
		o.insert(r)
	}
	// A time's offset shows in the API and in Hash.
	cest := time.FixedZone("CEST", 2*3600)
	first, _ := o.all.Min()
	first.state.RegisteredAt = base.In(cest)

	blob, _ := m.Snapshot(nil)
	r := New()
	if err := r.Restore(blob); err != nil {
		t.Fatal(err)
	}
	if r.Checkpoint() != m.Checkpoint() || r.Hash() != m.Hash() {
		t.Fatal("restore changed the checkpoint or the hash")
	}
	o.all.Ascend(func(want *record) bool {
		got := r.orgs["acme"].byKey[want.key]
		if got == nil {
			t.Fatalf("machine %s lost", want.key)
		}
		w, g := want.view("acme"), got.view("acme")
		if w.RegisteredAt.Location() == cest {
			if _, offset := g.RegisteredAt.Zone(); offset != 2*3600 || !g.RegisteredAt.Equal(w.RegisteredAt) {
				t.Errorf("registered at %v, want %v", g.RegisteredAt, w.RegisteredAt)
			}
			w.RegisteredAt, g.RegisteredAt = time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(w, g) {
			t.Errorf("machine %s changed:\n got %+v\nwant %+v", want.key, g, w)
		}
		return true
	})
}

// TestMachineProjectionSnapshot: the projection's snapshot restores into
// a new model, which the projection then serves; a bad one changes nothing.
func TestMachineProjectionSnapshot(t *testing.T) {
	m, evs := twoOrgs(t)
	p := NewMachineProjection()
	for _, e := range evs {
		p.Model().Apply(e.seq, e.org, e.uuid, e.at, e.event)
	}
	var buf bytes.Buffer
	checkpoint, err := p.Snapshot(&buf)
	if err != nil || checkpoint != m.Checkpoint() {
		t.Fatalf("snapshot at %d (%v), want %d", checkpoint, err, m.Checkpoint())
	}
	restored := NewMachineProjection()
	before := restored.Model()
	if got, err := restored.Restore(&buf); err != nil || got != checkpoint {
		t.Fatalf("restored at %d (%v), want %d", got, err, checkpoint)
	}
	if restored.Model() == before || restored.Model().Hash() != m.Hash() {
		t.Fatal("restore did not swap in the snapshot's model")
	}
	kept := restored.Model()
	if _, err := restored.Restore(bytes.NewBufferString("not a snapshot")); err == nil || restored.Model() != kept {
		t.Fatalf("a bad snapshot was restored (%v) or replaced the model", err)
	}
}

// TestSnapshotWhileApplying applies events between the batches of a
// snapshot, and checks that the snapshot, restored and given the events
// after its checkpoint, ends in the state of the model that applied them
// all: machines changed, created and deleted behind and ahead of the
// encoding, some more than once.
func TestSnapshotWhileApplying(t *testing.T) {
	defer func(n int) { snapshotBatch = n }(snapshotBatch)
	defer func() { betweenSnapshotBatches = nil }()
	_, evs := twoOrgs(t)
	seq := uint64(len(evs))
	evs = append(evs, fleet("acme", 100, 11, &seq)...) // registers machines the model has again
	for _, e := range evs[:200] {
		seq++
		evs = append(evs, envelope{seq: seq, org: e.org, uuid: e.uuid, at: e.at, event: machine.Deleted{Policy: machine.DeletionUnsafe}})
	}
	for _, batch := range []int{1, 7, 64} {
		snapshotBatch = batch
		for _, perPause := range []int{1, 5, 40} {
			m := New()
			load(m, evs[:len(evs)/3])
			next := len(evs) / 3
			betweenSnapshotBatches = func() {
				end := min(next+perPause, len(evs))
				load(m, evs[next:end])
				next = end
			}
			blob, checkpoint := m.Snapshot(nil)
			betweenSnapshotBatches = nil
			if checkpoint != uint64(len(evs)/3) || next == len(evs)/3 {
				t.Fatalf("batch %d: the snapshot covers %d, and %d events were applied while it encoded", batch, checkpoint, next-len(evs)/3)
			}
			load(m, evs[next:])
			r := New()
			if err := r.Restore(blob); err != nil {
				t.Fatal(err)
			}
			load(r, evs[checkpoint:]) // sequences are 1-based and dense
			if r.Hash() != m.Hash() {
				t.Fatalf("batch %d, %d events per pause: the snapshot and the events after it differ from the model", batch, perPause)
			}
		}
	}
}

// TestSnapshotBesideApply takes snapshots while another goroutine applies
// events (for the race detector), and checks each as above.
func TestSnapshotBesideApply(t *testing.T) {
	defer func(n int) { snapshotBatch = n }(snapshotBatch)
	snapshotBatch = 7
	_, evs := twoOrgs(t)
	m := New()
	load(m, evs[:len(evs)/3])
	done := make(chan struct{})
	go func() {
		defer close(done)
		load(m, evs[len(evs)/3:])
	}()
	var snapshots [][]byte
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		blob, _ := m.Snapshot(nil)
		snapshots = append(snapshots, blob)
	}
	for i, blob := range snapshots {
		r := New()
		if err := r.Restore(blob); err != nil {
			t.Fatal(err)
		}
		load(r, evs[r.Checkpoint():])
		if r.Hash() != m.Hash() {
			t.Fatalf("snapshot %d of %d (checkpoint %d) and the events after it differ from the model", i+1, len(snapshots), r.Checkpoint())
		}
	}
}
