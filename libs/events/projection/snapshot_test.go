package projection

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// snapshotSums is sums with snapshots (JSON with a version), counting the
// events it applies.
type snapshotSums struct {
	*sums
	version int // what Snapshot writes and Restore accepts
	applied atomic.Int64
}

type sumsSnapshot struct {
	Version    int                 `json:"version"`
	Checkpoint uint64              `json:"checkpoint"`
	Sum        map[string]int      `json:"sum"`
	Labels     map[string][]string `json:"labels"`
}

func newSnapshotSums(version int) *snapshotSums {
	return &snapshotSums{sums: newSums(), version: version}
}

func (s *snapshotSums) Apply(env *events.Envelope, payload any) error {
	s.applied.Add(1)
	return s.sums.Apply(env, payload)
}

func (s *snapshotSums) Snapshot(w *bytes.Buffer) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpoint, json.NewEncoder(w).Encode(sumsSnapshot{Version: s.version, Checkpoint: s.checkpoint, Sum: s.sum, Labels: s.labels})
}

func (s *snapshotSums) Restore(r *bytes.Buffer) (uint64, error) {
	var snap sumsSnapshot
	if err := json.NewDecoder(r).Decode(&snap); err != nil {
		return 0, err
	}
	if snap.Version != s.version {
		return 0, fmt.Errorf("snapshot version %d, want %d", snap.Version, s.version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpoint, s.sum, s.labels = snap.Checkpoint, snap.Sum, snap.Labels
	return snap.Checkpoint, nil
}

func snapshotStore(t *testing.T, env *eventstest.Env) *SnapshotStore {
	t.Helper()
	store, err := NewSnapshotStore(context.Background(), env.JS, 1)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// storedCheckpoint is the checkpoint of name's stored snapshot; 0 if none.
func storedCheckpoint(t *testing.T, store *SnapshotStore, name string) uint64 {
	t.Helper()
	info, err := store.stored(context.Background(), name)
	if err == errNoSnapshot {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	meta, err := parseSnapshotMeta(info.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return meta.checkpoint
}

// rebuiltHash is the hash of a model fed the whole log by a runner without
// snapshots.
func rebuiltHash(t *testing.T, env *eventstest.Env, last uint64) [32]byte {
	t.Helper()
	clean := newSums()
	stop := runUntil(t, NewRunner(Config{Name: "rebuilt"}, env.JS, registry(), clean, nil, nil), last)
	stop()
	return clean.hash()
}

// writeSnapshot runs a projection with cfg up to last, and has it write a
// snapshot.
func writeSnapshot(t *testing.T, env *eventstest.Env, cfg Config, last uint64) {
	t.Helper()
	r := NewRunner(cfg, env.JS, registry(), newSnapshotSums(1), nil, nil)
	stop := runUntil(t, r, last)
	defer stop()
	if err := r.WriteSnapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// TestRestartFromSnapshotAppliesOnlyTheEventsAfterIt: once live, the
// runner writes a snapshot by itself; the next start restores it, applies
// only the events appended since, and ends where a rebuild ends.
func TestRestartFromSnapshotAppliesOnlyTheEventsAfterIt(t *testing.T) {
	env := eventstest.Start(t, registry())
	store := snapshotStore(t, env)
	last := fill(t, env.Store, 20, 10)
	cfg := Config{Name: "snapshotted", Snapshots: store, SnapshotEvery: 50}

	first := newSnapshotSums(1)
	stop := runUntil(t, NewRunner(cfg, env.JS, registry(), first, nil, nil), last)
	eventstest.Eventually(t, "a snapshot of the whole log", 30*time.Second, 10*time.Millisecond, func() (bool, string) {
		cp := storedCheckpoint(t, store, cfg.Name)
		return cp == last, fmt.Sprintf("stored snapshot at %d, want %d", cp, last)
	})
	stop()

	last = fill(t, env.Store, 20, 2) // while it is down
	second := newSnapshotSums(1)
	r := NewRunner(cfg, env.JS, registry(), second, nil, nil)
	stop = runUntil(t, r, last)
	defer stop()
	if !r.Live() {
		t.Fatal("caught up but not live")
	}
	if n := second.applied.Load(); n != 40 {
		t.Fatalf("applied %d events after the restore, want the 40 appended after the snapshot", n)
	}
	if second.hash() != rebuiltHash(t, env, last) {
		t.Fatal("restored and caught up differs from a rebuild")
	}
}

// TestUnusableSnapshotsAreRebuilt: whatever is wrong with a snapshot, the
// start replays the log from zero instead, and says so.
func TestUnusableSnapshotsAreRebuilt(t *testing.T) {
	env := eventstest.Start(t, registry())
	store := snapshotStore(t, env)
	last := fill(t, env.Store, 10, 5)
	want := rebuiltHash(t, env, last)
	ctx := context.Background()

	cases := []struct {
		name  string
		spoil func(meta map[string]string, data []byte) (map[string]string, []byte)
		model int // the version the restarted model reads
	}{
		{"damaged", func(m map[string]string, d []byte) (map[string]string, []byte) { return m, d[:len(d)/2] }, 1},
		{"model-version", func(m map[string]string, d []byte) (map[string]string, []byte) { return m, d }, 2},
		{"format", func(m map[string]string, d []byte) (map[string]string, []byte) { m[metaFormat] = "2"; return m, d }, 1},
		{"no-metadata", func(m map[string]string, d []byte) (map[string]string, []byte) { return nil, d }, 1},
		{"checkpoint-disagrees", func(m map[string]string, d []byte) (map[string]string, []byte) {
			m[metaCheckpoint] = fmt.Sprint(last - 1)
			return m, d
		}, 1},
		{"other-filter", func(m map[string]string, d []byte) (map[string]string, []byte) {
			m[metaFilter] = "events.*.org.> "
			return m, d
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Name: "spoilt-" + c.name, Snapshots: store, SnapshotEvery: -1}
			writeSnapshot(t, env, cfg, last)
			res, err := store.obs.GetBytes(ctx, cfg.Name)
			if err != nil {
				t.Fatal(err)
			}
			info, err := store.stored(ctx, cfg.Name)
			if err != nil {
				t.Fatal(err)
			}
			meta, data := c.spoil(maps.Clone(info.Metadata), res)
			if _, err := store.obs.Put(ctx, jetstream.ObjectMeta{Name: cfg.Name, Metadata: meta}, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}

			failures := counterValue(snapshotFailures.WithLabelValues(cfg.Name, "restore"))
			second := newSnapshotSums(c.model)
			stop := runUntil(t, NewRunner(cfg, env.JS, registry(), second, nil, nil), last)
			stop()
			if n := second.applied.Load(); n != int64(last) {
				t.Fatalf("applied %d events, want all %d (a rebuild)", n, last)
			}
			if second.hash() != want {
				t.Fatal("rebuild differs")
			}
			if got := counterValue(snapshotFailures.WithLabelValues(cfg.Name, "restore")); got != failures+1 {
				t.Fatalf("restore failures %v, want %v", got, failures+1)
			}
		})
	}
}

// TestRecreatedStreamIsRebuilt: a snapshot of a stream that was deleted
// and created again describes events that are gone, even when the new
// stream has as many.
func TestRecreatedStreamIsRebuilt(t *testing.T) {
	env := eventstest.Start(t, registry())
	store := snapshotStore(t, env)
	ctx := context.Background()
	last := fill(t, env.Store, 10, 5)
	cfg := Config{Name: "recreated", Snapshots: store, SnapshotEvery: -1}
	writeSnapshot(t, env, cfg, last)

	if err := env.JS.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatal(err)
	}
	fresh, err := events.NewJetStreamStore(ctx, env.JS, registry(), events.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Other events, more of them: the snapshot's checkpoint is within the
	// new stream, so only its creation time tells.
	last = fill(t, fresh, 12, 5)
	if last < storedCheckpoint(t, store, cfg.Name) {
		t.Fatalf("the new stream ends at %d, before the snapshot's %d", last, storedCheckpoint(t, store, cfg.Name))
	}
	second := newSnapshotSums(1)
	stop := runUntil(t, NewRunner(cfg, env.JS, registry(), second, nil, nil), last)
	stop()
	if n := second.applied.Load(); n != int64(last) {
		t.Fatalf("applied %d events, want all %d (a rebuild)", n, last)
	}
	if second.hash() != rebuiltHash(t, env, last) {
		t.Fatal("rebuild differs")
	}
}

// TestSnapshotFits covers each way a stream can have changed under a
// snapshot.
func TestSnapshotFits(t *testing.T) {
	created := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	meta := snapshotMeta{checkpoint: 100, streamCreated: created, streamFirstSeq: 1, filter: "events.*.machine.> "}
	stream := func(first, last uint64, created time.Time) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Created: created, State: jetstream.StreamState{FirstSeq: first, LastSeq: last}}
	}
	cases := []struct {
		name   string
		stream *jetstream.StreamInfo
		filter string
		want   string // "" fits
	}{
		{"same", stream(1, 150, created), meta.filter, ""},
		{"at its end", stream(1, 100, created), meta.filter, ""},
		{"same instant elsewhere", stream(1, 150, created.In(time.FixedZone("X", 3600))), meta.filter, ""},
		{"recreated", stream(1, 150, created.Add(time.Nanosecond)), meta.filter, "recreated"},
		{"shorter", stream(1, 99, created), meta.filter, "beyond the stream's last"},
		{"purged", stream(101, 100, created), meta.filter, "removed"},
		{"other events", stream(1, 150, created), "events.*.org.> ", "the projection reads"},
	}
	for _, c := range cases {
		err := meta.fits(c.filter, c.stream)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	back, err := parseSnapshotMeta(meta.encode())
	if err != nil || back.checkpoint != meta.checkpoint || !back.streamCreated.Equal(created) || back.streamFirstSeq != 1 || back.filter != meta.filter {
		t.Fatalf("metadata round trip: %+v %v", back, err)
	}
}

// TestSnapshotsBesideApply writes snapshots while events arrive and are
// applied (for the race detector); a restart from the last one ends where
// a rebuild ends.
func TestSnapshotsBesideApply(t *testing.T) {
	env := eventstest.Start(t, registry())
	store := snapshotStore(t, env)
	ctx := context.Background()
	cfg := Config{Name: "busy", Snapshots: store, SnapshotEvery: 5, AckEvery: 3}
	first := newSnapshotSums(1)
	r := NewRunner(cfg, env.JS, registry(), first, nil, nil)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	if err := r.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var last atomic.Uint64
	for w := range 3 {
		wg.Go(func() {
			for i := range 60 {
				envs, err := env.Store.Append(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: fmt.Sprintf("w%d", w)}, events.Any, events.New(added{N: i})...)
				if err != nil {
					t.Error(err)
					return
				}
				for {
					seen := last.Load()
					if envs[0].Sequence <= seen || last.CompareAndSwap(seen, envs[0].Sequence) {
						break
					}
				}
			}
		})
	}
	for range 10 { // and a caller's, beside the runner's own
		if err := r.WriteSnapshot(ctx); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := r.WaitFor(wctx, last.Load()); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if storedCheckpoint(t, store, cfg.Name) == 0 {
		t.Fatal("no snapshot was written")
	}
	second := newSnapshotSums(1)
	stop := runUntil(t, NewRunner(cfg, env.JS, registry(), second, nil, nil), last.Load())
	stop()
	if second.hash() != rebuiltHash(t, env, last.Load()) {
		t.Fatal("restored and caught up differs from a rebuild")
	}
}

// TestOrphanedChunksAreRemoved: chunks that no snapshot refers to (left by
// two replicas writing at once) go at the next write; the snapshot stays.
func TestOrphanedChunksAreRemoved(t *testing.T) {
	env := eventstest.Start(t, registry())
	store := snapshotStore(t, env)
	store.orphanAge = 0
	ctx := context.Background()
	orphan := "$O." + SnapshotBucket + ".C.orphan"
	if _, err := env.JS.Publish(ctx, orphan, []byte("left behind")); err != nil {
		t.Fatal(err)
	}
	last := fill(t, env.Store, 3, 3)
	cfg := Config{Name: "tidy", Snapshots: store, SnapshotEvery: -1}
	writeSnapshot(t, env, cfg, last)
	stream, err := env.JS.Stream(ctx, "OBJ_"+SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O."+SnapshotBucket+".C.>"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.State.Subjects[orphan]; ok || len(info.State.Subjects) != 1 {
		t.Fatalf("chunk subjects after the write: %v, want only the snapshot's", info.State.Subjects)
	}
	if _, _, err := store.read(ctx, cfg.Name, func(*jetstream.ObjectInfo) error { return nil }); err != nil {
		t.Fatalf("the snapshot itself: %v", err)
	}
}
