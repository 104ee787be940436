package projection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events"
)

// Snapshotter is a Model that can save its state with the checkpoint that
// state covers, so that a start restores it and replays only the events
// after it instead of the whole log.
type Snapshotter interface {
	// Snapshot writes the model's state and returns the checkpoint to
	// replay from: restoring it and applying the events after the
	// checkpoint must give the model's state. Snapshot runs beside Apply;
	// a model may go on applying while it encodes if Apply then skips
	// what the snapshot already holds (the registry's machines do). w is
	// in memory; the snapshot is stored once Snapshot has returned.
	Snapshot(w *bytes.Buffer) (checkpoint uint64, err error)
	// Restore replaces the model's state with one that Snapshot wrote, and
	// returns its checkpoint. It refuses (with an error) a snapshot of
	// another format, or one whose state the model's Apply would no longer
	// derive from the same events: the runner then rebuilds from the log.
	Restore(r *bytes.Buffer) (checkpoint uint64, err error)
}

// SnapshotBucket is the object store bucket of projection snapshots: one
// object per projection name, shared by the replicas of a service (any
// replica's state at a checkpoint is every replica's).
const SnapshotBucket = "anvil_projection_snapshots"

// DefaultSnapshotEvery is how many applied events a new snapshot waits
// for when Config.SnapshotEvery is 0: a start then replays at most that
// many events after its snapshot (50,000 took about a second on a loaded
// 2-core machine, docs/performance.md).
const DefaultSnapshotEvery = 100_000

// snapshotFormat is the version of what the runner stores around a
// model's snapshot (the object's metadata); the model versions its own
// bytes.
const snapshotFormat = 1

// The metadata keys of a snapshot object.
const (
	metaFormat         = "format"
	metaCheckpoint     = "checkpoint"
	metaStreamCreated  = "stream_created"
	metaStreamFirstSeq = "stream_first_seq"
	metaFilter         = "filter"
)

var (
	snapshotWriteSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_projection_snapshot_write_seconds",
		Help:    "Seconds to write a projection snapshot: encoding it (which holds up Apply) and storing it.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"projection"})
	snapshotBytes = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_projection_snapshot_bytes",
		Help: "Size of the projection's last snapshot written or restored.",
	}, []string{"projection"})
	snapshotCheckpoint = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_projection_snapshot_checkpoint",
		Help: "Stream sequence that the projection's last snapshot written or restored covers.",
	}, []string{"projection"})
	snapshotRestoreSeconds = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "anvil_projection_snapshot_restore_seconds",
		Help: "Seconds the projection took at its start to read and restore its snapshot; 0 when it had none to use.",
	}, []string{"projection"})
	snapshotFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_projection_snapshot_failures_total",
		Help: "Snapshots that could not be written (op=write) or were not used at a start (op=restore): the start replayed the log instead.",
	}, []string{"projection", "op"})
)

// SnapshotStore keeps projection snapshots in the SnapshotBucket object
// store.
type SnapshotStore struct {
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	// orphanAge: chunks that no object refers to are removed once they
	// are this old (younger ones may belong to a write under way).
	orphanAge time.Duration
}

// NewSnapshotStore creates the bucket if it is missing; replicas 0 means 1.
func NewSnapshotStore(ctx context.Context, js jetstream.JetStream, replicas int) (*SnapshotStore, error) {
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      SnapshotBucket,
		Description: "projection snapshots, one per projection, each with the stream sequence it covers",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot bucket: %w", err)
	}
	return &SnapshotStore{js: js, obs: obs, orphanAge: 10 * time.Minute}, nil
}

// snapshotMeta is what a snapshot says about itself, in its object's
// metadata, so that it is judged against the stream before it is read.
type snapshotMeta struct {
	checkpoint uint64
	// The stream's creation time and first sequence when the snapshot was
	// written: the EVENTS stream allows neither purges nor deletions of
	// messages, so a change of either means that it was recreated (or
	// restored) and the snapshot describes events it no longer holds.
	streamCreated  time.Time
	streamFirstSeq uint64
	// filter is what the projection read; a snapshot of other events
	// cannot be continued.
	filter string
}

func (m snapshotMeta) encode() map[string]string {
	return map[string]string{
		metaFormat:         strconv.Itoa(snapshotFormat),
		metaCheckpoint:     strconv.FormatUint(m.checkpoint, 10),
		metaStreamCreated:  m.streamCreated.UTC().Format(time.RFC3339Nano),
		metaStreamFirstSeq: strconv.FormatUint(m.streamFirstSeq, 10),
		metaFilter:         m.filter,
	}
}

func parseSnapshotMeta(md map[string]string) (snapshotMeta, error) {
	if f := md[metaFormat]; f != strconv.Itoa(snapshotFormat) {
		return snapshotMeta{}, fmt.Errorf("snapshot has format %q, this build reads %d", f, snapshotFormat)
	}
	var m snapshotMeta
	var err error
	if m.checkpoint, err = strconv.ParseUint(md[metaCheckpoint], 10, 64); err != nil {
		return m, fmt.Errorf("snapshot metadata: checkpoint: %w", err)
	}
	if m.streamCreated, err = time.Parse(time.RFC3339Nano, md[metaStreamCreated]); err != nil {
		return m, fmt.Errorf("snapshot metadata: stream creation time: %w", err)
	}
	if m.streamFirstSeq, err = strconv.ParseUint(md[metaStreamFirstSeq], 10, 64); err != nil {
		return m, fmt.Errorf("snapshot metadata: stream first sequence: %w", err)
	}
	m.filter = md[metaFilter]
	return m, nil
}

// fits says why a snapshot cannot be continued with the stream as it is
// now, or returns nil.
func (m snapshotMeta) fits(filter string, stream *jetstream.StreamInfo) error {
	switch st := stream.State; {
	case m.filter != filter:
		return fmt.Errorf("snapshot is of the events %q, the projection reads %q", m.filter, filter)
	case !m.streamCreated.Equal(stream.Created):
		return fmt.Errorf("the stream was recreated after the snapshot (created %s, the snapshot's at %s)",
			stream.Created.UTC().Format(time.RFC3339Nano), m.streamCreated.Format(time.RFC3339Nano))
	case m.checkpoint > st.LastSeq:
		return fmt.Errorf("snapshot covers up to sequence %d, beyond the stream's last (%d)", m.checkpoint, st.LastSeq)
	case m.streamFirstSeq != st.FirstSeq:
		return fmt.Errorf("events were removed from the stream after the snapshot (first sequence %d, was %d)", st.FirstSeq, m.streamFirstSeq)
	}
	return nil
}

// filterKey names what a projection reads, for snapshotMeta.filter.
func filterKey(f events.Filter) string {
	types := slices.Sorted(slices.Values(f.EventTypes))
	return f.ConsumerSubject() + " " + strings.Join(types, ",")
}

// errNoSnapshot: the store holds no snapshot of the projection.
var errNoSnapshot = errors.New("no snapshot")

// snapshotChunk is the object store's chunk size for snapshots: bigger
// than its default (128 KiB) to send fewer messages, within the server's
// 1 MiB payload limit.
const snapshotChunk = 512 << 10

func (s *SnapshotStore) put(ctx context.Context, name string, meta snapshotMeta, data []byte) error {
	_, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: "snapshot of projection " + name,
		Metadata: meta.encode(), Opts: &jetstream.ObjectMetaOptions{ChunkSize: snapshotChunk}}, bytes.NewReader(data))
	return err
}

// stored returns the metadata of the projection's snapshot; errNoSnapshot
// if there is none.
func (s *SnapshotStore) stored(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, errNoSnapshot
	}
	return info, err
}

// read reads the projection's snapshot into memory, which also checks its
// digest, if usable accepts its metadata (asked before the read, and again
// of the object read, in case another replica replaced it in between). A
// reader whose object is replaced under it (which removes the chunks of
// the old one) would wait forever, so the read has a deadline that the
// size sets.
func (s *SnapshotStore) read(ctx context.Context, name string, usable func(*jetstream.ObjectInfo) error) (*bytes.Buffer, *jetstream.ObjectInfo, error) {
	info, err := s.stored(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if err := usable(info); err != nil {
		return nil, info, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(info.Size/(10<<20))*time.Second)
	defer cancel()
	res, err := s.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil, errNoSnapshot
	}
	if err != nil {
		return nil, info, err
	}
	defer res.Close()
	if info, err = res.Info(); err != nil {
		return nil, nil, err
	}
	if err := usable(info); err != nil {
		return nil, info, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, info.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(res); err != nil {
		return nil, info, fmt.Errorf("reading the snapshot: %w", err)
	}
	return buf, info, nil
}

// sweepOrphans removes chunks that no object refers to. Put replaces an
// object and then removes the chunks of the version it replaced, as it
// saw it when it began: of two replicas writing the same snapshot at once,
// the one that finishes first leaves its chunks behind for good.
func (s *SnapshotStore) sweepOrphans(ctx context.Context) error {
	stream, err := s.js.Stream(ctx, "OBJ_"+SnapshotBucket)
	if err != nil {
		return err
	}
	prefix := "$O." + SnapshotBucket + ".C."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return err
	}
	objects, err := s.obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return err
	}
	referenced := map[string]bool{}
	for _, o := range objects {
		referenced[o.NUID] = true
	}
	for subject := range info.State.Subjects {
		if referenced[strings.TrimPrefix(subject, prefix)] {
			continue
		}
		last, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil || time.Since(last.Time) < s.orphanAge {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return err
		}
	}
	return nil
}

// snapshotState is a runner's snapshot bookkeeping; nil fields mean that
// it takes no snapshots.
type snapshotState struct {
	store *SnapshotStore
	model Snapshotter
	// since counts the events handled since the last snapshot; wake
	// wakes the writer once SnapshotEvery have been.
	since atomic.Int64
	wake  chan struct{}
	// written serializes writes, and guards saved and size.
	written chan struct{}
	saved   uint64 // checkpoint of the last snapshot written or restored
	size    int

	writeSeconds             prometheus.Observer
	bytes, checkpoint        prometheus.Gauge
	restoreSeconds           prometheus.Gauge
	writeFailed, restoreFail prometheus.Counter
}

func (r *Runner) setUpSnapshots(model Model) {
	if r.cfg.Snapshots == nil {
		return
	}
	sm, ok := model.(Snapshotter)
	if !ok {
		r.log.Warn("the model cannot be snapshotted (it is no projection.Snapshotter): Config.Snapshots is ignored")
		return
	}
	if r.cfg.SnapshotEvery == 0 {
		r.cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	name := r.cfg.Name
	r.snap = &snapshotState{store: r.cfg.Snapshots, model: sm, wake: make(chan struct{}, 1), written: make(chan struct{}, 1),
		writeSeconds: snapshotWriteSeconds.WithLabelValues(name), bytes: snapshotBytes.WithLabelValues(name),
		checkpoint: snapshotCheckpoint.WithLabelValues(name), restoreSeconds: snapshotRestoreSeconds.WithLabelValues(name),
		writeFailed: snapshotFailures.WithLabelValues(name, "write"), restoreFail: snapshotFailures.WithLabelValues(name, "restore")}
}

// restoreSnapshot restores the newest snapshot that fits the stream. A
// snapshot that is missing, cannot be read or does not fit leaves the
// model empty, with the reason logged: the log is replayed from the start,
// and the start never fails because of a snapshot.
func (r *Runner) restoreSnapshot(ctx context.Context) {
	start := time.Now()
	checkpoint, size, err := r.loadSnapshot(ctx)
	switch {
	case err == nil:
		d := time.Since(start)
		r.snap.restoreSeconds.Set(d.Seconds())
		r.snap.bytes.Set(float64(size))
		r.snap.checkpoint.Set(float64(checkpoint))
		r.snap.written <- struct{}{}
		r.snap.saved, r.snap.size = checkpoint, size
		<-r.snap.written
		r.log.Info("restored from snapshot", "checkpoint", checkpoint, "bytes", size, "seconds", d.Seconds())
	case errors.Is(err, errNoSnapshot):
		r.log.Info("no snapshot: replaying the log from the start")
	case ctx.Err() != nil:
		r.model.Reset()
	default:
		r.model.Reset()
		r.snap.restoreFail.Inc()
		r.log.Warn("snapshot not used: replaying the log from the start", "reason", err.Error())
	}
}

// loadSnapshot reads and restores the snapshot; if it fails while another
// replica replaced the snapshot, it tries the new one (at most twice).
func (r *Runner) loadSnapshot(ctx context.Context) (checkpoint uint64, size int, err error) {
	for attempt := 1; ; attempt++ {
		var nuid string
		checkpoint, size, nuid, err = r.tryLoadSnapshot(ctx)
		if err == nil || errors.Is(err, errNoSnapshot) || attempt == 3 || ctx.Err() != nil {
			return checkpoint, size, err
		}
		now, serr := r.snap.store.stored(ctx, r.cfg.Name)
		if serr != nil || now.NUID == nuid {
			return checkpoint, size, err
		}
		r.log.Info("snapshot replaced while it was read: reading the new one", "err", err.Error())
	}
}

func (r *Runner) tryLoadSnapshot(ctx context.Context) (checkpoint uint64, size int, nuid string, err error) {
	stream, err := r.js.Stream(ctx, events.StreamName)
	if err != nil {
		return 0, 0, "", err
	}
	var meta snapshotMeta
	buf, info, err := r.snap.store.read(ctx, r.cfg.Name, func(info *jetstream.ObjectInfo) error {
		m, err := parseSnapshotMeta(info.Metadata)
		if err != nil {
			return err
		}
		meta = m
		return meta.fits(filterKey(r.cfg.Filter), stream.CachedInfo())
	})
	if info != nil {
		nuid = info.NUID
	}
	if err != nil {
		return 0, 0, nuid, err
	}
	size = buf.Len()
	if checkpoint, err = r.snap.model.Restore(buf); err != nil {
		return 0, 0, nuid, err
	}
	if checkpoint != meta.checkpoint {
		return 0, 0, nuid, fmt.Errorf("snapshot holds checkpoint %d, its metadata says %d", checkpoint, meta.checkpoint)
	}
	return checkpoint, size, nuid, nil
}

// snapshotEvent counts an event handled; once SnapshotEvery have been
// since the last snapshot and the projection is live, it wakes the writer.
func (r *Runner) snapshotEvent() {
	if r.snap.since.Add(1) >= int64(r.cfg.SnapshotEvery) {
		r.wakeSnapshotWriter()
	}
}

// wakeSnapshotWriter asks for a snapshot if SnapshotEvery events are
// waiting for one and the projection is live.
func (r *Runner) wakeSnapshotWriter() {
	if r.cfg.SnapshotEvery <= 0 || r.snap.since.Load() < int64(r.cfg.SnapshotEvery) || !r.observing.Load() {
		return
	}
	select {
	case r.snap.wake <- struct{}{}:
	default: // already woken
	}
}

// writeSnapshots writes a snapshot when snapshotEvent or the interval asks
// for one, until ctx ends. It runs beside the consumer, which only waits
// while the model encodes.
func (r *Runner) writeSnapshots(ctx context.Context) {
	var tick <-chan time.Time
	if r.cfg.SnapshotInterval > 0 {
		t := time.NewTicker(r.cfg.SnapshotInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.snap.wake:
		case <-tick:
		}
		if !r.observing.Load() {
			continue // catching up: the snapshot follows once live
		}
		if err := r.WriteSnapshot(ctx); err != nil && ctx.Err() == nil {
			r.snap.writeFailed.Inc()
			r.log.Warn("writing a snapshot failed: the next start replays more of the log", "err", err.Error())
		}
	}
}

// snapshotAtStopTimeout bounds the snapshot a stopping runner writes: a
// second or two at a million machines.
const snapshotAtStopTimeout = 10 * time.Second

// snapshotAtStop writes a last snapshot when the runner stops, so that a
// planned restart (a rolling update) replays next to nothing. Without a
// connection it does not try: a stop must not wait for timeouts.
func (r *Runner) snapshotAtStop(ctx context.Context) {
	if r.js.Conn().Status() != nats.CONNECTED {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotAtStopTimeout)
	defer cancel()
	if err := r.WriteSnapshot(ctx); err != nil {
		r.snap.writeFailed.Inc()
		r.log.Warn("writing a snapshot at stop failed: the next start replays more of the log", "err", err.Error())
	}
}

// WriteSnapshot stores a snapshot of the model now, unless the stored one
// already covers its checkpoint. The runner writes them by itself (see
// Config.SnapshotEvery, and when it stops); this is for a caller that
// knows better. It fails if the runner takes no snapshots.
func (r *Runner) WriteSnapshot(ctx context.Context) (err error) {
	if r.snap == nil {
		return errors.New("projection " + r.cfg.Name + " takes no snapshots")
	}
	select {
	case r.snap.written <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.snap.written }()
	if r.model.Checkpoint() <= r.snap.saved {
		return nil
	}
	start := time.Now()
	// A write that fails leaves its events counted, so that the next
	// event tries again instead of a whole period later.
	taken := r.snap.since.Swap(0)
	defer func() {
		if err != nil {
			r.snap.since.Add(taken)
		}
	}()
	// The stream's identity is read before the model: the snapshot may
	// then be older than the stream's state, never newer.
	stream, err := r.js.Stream(ctx, events.StreamName)
	if err != nil {
		return err
	}
	si := stream.CachedInfo()
	buf := bytes.NewBuffer(make([]byte, 0, r.snap.size+r.snap.size/8))
	checkpoint, err := r.snap.model.Snapshot(buf)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	if checkpoint <= r.snap.saved {
		return nil
	}
	meta := snapshotMeta{checkpoint: checkpoint, streamCreated: si.Created, streamFirstSeq: si.State.FirstSeq, filter: filterKey(r.cfg.Filter)}
	if meta.streamFirstSeq == 0 { // the stream was empty when read; the snapshot's events start it
		meta.streamFirstSeq = 1
	}
	// Replicas write the same snapshot; one that another has overtaken
	// is not worth storing.
	if info, err := r.snap.store.stored(ctx, r.cfg.Name); err == nil {
		if other, err := parseSnapshotMeta(info.Metadata); err == nil && other.filter == meta.filter &&
			other.streamCreated.Equal(meta.streamCreated) && other.checkpoint >= checkpoint {
			r.snap.saved = checkpoint
			return nil
		}
	}
	if err := r.snap.store.put(ctx, r.cfg.Name, meta, buf.Bytes()); err != nil {
		return fmt.Errorf("storing: %w", err)
	}
	r.snap.saved, r.snap.size = checkpoint, buf.Len()
	d := time.Since(start)
	r.snap.writeSeconds.Observe(d.Seconds())
	r.snap.bytes.Set(float64(buf.Len()))
	r.snap.checkpoint.Set(float64(checkpoint))
	r.log.Debug("snapshot written", "checkpoint", checkpoint, "bytes", buf.Len(), "seconds", d.Seconds())
	if err := r.snap.store.sweepOrphans(ctx); err != nil {
		r.log.Warn("removing the chunks of replaced snapshots failed; the next write retries", "err", err.Error())
	}
	return nil
}
