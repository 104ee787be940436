package readmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// restartFleet publishes events to a real JetStream as the registry's
// appends store them, asynchronously: filling the log is set-up, not what
// is measured.
type restartFleet struct {
	b    *testing.B
	env  *eventstest.Env
	sent int
}

func (f *restartFleet) publish(org, uuid string, at time.Time, event any) {
	payload, err := json.Marshal(event)
	if err != nil {
		f.b.Fatal(err)
	}
	f.sent++
	env := events.Envelope{ID: fmt.Sprintf("bench-%d", f.sent), Type: event.(events.Payload).EventType(), SchemaVersion: 1,
		Org: org, AggregateType: "machine", AggregateID: uuid, Time: at, Actor: "bench", Payload: payload}
	if _, err := f.env.JS.PublishMsgAsync(events.EncodeMsg(&env)); err != nil {
		f.b.Fatal(err)
	}
	if f.sent%2048 == 0 { // within the 4,000 publishes a connection lets wait
		f.wait()
	}
}

func (f *restartFleet) wait() {
	select {
	case <-f.env.JS.PublishAsyncComplete():
	case <-time.After(time.Minute):
		f.b.Fatal("async publish stalled")
	}
}

// flush waits for every publish, and returns the log's last sequence.
func (f *restartFleet) flush() uint64 {
	f.wait()
	head, err := f.env.Store.Head(context.Background())
	if err != nil {
		f.b.Fatal(err)
	}
	return head
}

// startMachines runs the registry's machine projection as the service
// configures it, until the returned stop; ready is how long it took to be
// live (restored and caught up with the log as it was at its start).
func startMachines(b *testing.B, env *eventstest.Env, reg *events.Registry, store *projection.SnapshotStore, name string) (p *MachineProjection, r *projection.Runner, ready time.Duration, stop func()) {
	p = NewMachineProjection()
	r = projection.NewRunner(projection.Config{Name: name, Filter: events.Filter{AggregateType: "machine"}, Snapshots: store, SnapshotEvery: -1},
		env.JS, reg, p, nil, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	if err := r.WaitLive(ctx); err != nil {
		b.Fatal(err)
	}
	return p, r, time.Since(start), func() { cancel(); <-done }
}

// restartPoint is one size's figures.
type restartPoint struct {
	machines int
	// restore: a start right after the snapshot; ready: one after the
	// snapshot and tail more events; rebuild: a start without snapshot.
	restore, ready, rebuild, write time.Duration
	snapshotBytes, heapBytes       float64 // per machine
	eventsInLog                    uint64
}

// BenchmarkRestart100k restarts the registry's machine projection over a
// real JetStream at 25,000, 50,000 and 100,000 machines (a realistic fleet
// of 9 to 11 events per machine, as the readmodel benchmarks have), each
// time from zero, from a snapshot just written, and from that snapshot
// with 50,000 events after it (half of --snapshot-every's default: what a
// start finds on average), and checks that every start reaches the state of
// the rebuild (Hash). Starts from zero are timed twice and starts from the
// snapshot three times, keeping the fastest: the machine it runs on is
// shared. It extrapolates to 1,000,000 machines, conservatively: the start
// from a snapshot by the larger of a least-squares line through the three
// sizes and the full size's in proportion, plus the catch-up of the 50,000
// events measured at the full size (which does not depend on the fleet's
// size); the rebuild likewise. ANVIL_BENCH_SCALE sets the size
// (docs/performance.md).
func BenchmarkRestart100k(b *testing.B) {
	full := eventstest.BenchSize(b, "machines", 100_000, 400)
	tail := eventstest.BenchSize(b, "events after the snapshot", projection.DefaultSnapshotEvery/2, 100)
	reg := events.NewRegistry()
	reg.RegisterAll(machine.EventTypes())
	ctx := context.Background()
	var points []restartPoint
	for b.Loop() {
		env := eventstest.Start(b, reg)
		store, err := projection.NewSnapshotStore(ctx, env.JS, 1)
		if err != nil {
			b.Fatal(err)
		}
		bucket, err := env.JS.ObjectStore(ctx, projection.SnapshotBucket)
		if err != nil {
			b.Fatal(err)
		}
		fleet := &restartFleet{b: b, env: env}
		var seq uint64
		points = points[:0]
		machines := 0
		for i, n := range []int{full / 4, full / 2, full} {
			// each size adds the machines it lacks as an organization of its own
			org := fmt.Sprintf("org-%d", i)
			genFleet(org, n-machines, uint64(i+1), &seq, func(e envelope) { fleet.publish(e.org, e.uuid, e.at, e.event) })
			machines = n
			head := fleet.flush()
			name := fmt.Sprintf("restart-%d", n)
			p := restartPoint{machines: n}

			rebuilt, r, rebuild, stop := startMachines(b, env, reg, store, name)
			if err := r.WaitFor(ctx, head); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := r.WriteSnapshot(ctx); err != nil {
				b.Fatal(err)
			}
			p.write = time.Since(start)
			stop()
			obj, err := bucket.GetInfo(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			p.snapshotBytes = float64(obj.Size) / float64(n)
			_, _, again, stop := startMachines(b, env, reg, nil, name+"-again")
			stop()
			p.rebuild = min(rebuild, again)

			for try := range 3 {
				restored, _, restore, stop := startMachines(b, env, reg, store, name)
				stop()
				if try == 0 || restore < p.restore {
					p.restore = restore
				}
				if restored.Model().Hash() != rebuilt.Model().Hash() {
					b.Fatalf("%d machines: restored differs from the rebuild", n)
				}
			}

			// The rebuilt model takes the events after the snapshot
			// directly, as the reference.
			for j := range tail {
				id, at, event := uuidFor(org, j%(n/4)), base.Add(time.Duration(j)*time.Second), machine.HostnameChanged{Hostname: fmt.Sprintf("renamed-%d", j)}
				fleet.publish(org, id, at, event)
				rebuilt.Model().Apply(head+uint64(j)+1, org, id, at, event)
			}
			if head = fleet.flush(); head != rebuilt.Model().Checkpoint() {
				b.Fatalf("the log ends at %d, the reference at %d", head, rebuilt.Model().Checkpoint())
			}
			p.eventsInLog = head
			want := rebuilt.Model().Hash()
			rebuilt = nil

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			restored, _, ready, stop := startMachines(b, env, reg, store, name)
			p.ready = ready
			if got := restored.Model().Checkpoint(); got != head {
				b.Fatalf("live at %d, want %d", got, head)
			}
			stop()
			runtime.GC()
			runtime.ReadMemStats(&after)
			p.heapBytes = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
			if restored.Model().Hash() != want {
				b.Fatalf("%d machines: restored and caught up differs from the rebuild", n)
			}
			runtime.KeepAlive(restored)
			points = append(points, p)
		}
		env.Stop()
	}
	last := points[len(points)-1]
	catchUp := max(last.ready-last.restore, 0)
	const million = 1_000_000
	scale := million / float64(last.machines)
	restoreAt := fitLine(points, func(p restartPoint) float64 { return p.restore.Seconds() })
	rebuildAt := fitLine(points, func(p restartPoint) float64 { return p.rebuild.Seconds() })
	ready1m := max(restoreAt(million), scale*last.restore.Seconds()) + catchUp.Seconds()
	rebuild1m := max(rebuildAt(million), scale*last.rebuild.Seconds())
	b.ReportMetric(last.ready.Seconds(), "ready_s")
	b.ReportMetric(last.restore.Seconds(), "restore_s")
	b.ReportMetric(last.rebuild.Seconds(), "rebuild_s")
	b.ReportMetric(last.rebuild.Seconds()/last.ready.Seconds(), "rebuild_vs_ready")
	b.ReportMetric(last.snapshotBytes, "bytes/machine")
	b.ReportMetric(last.heapBytes, "heap_bytes/machine")
	b.ReportMetric(last.write.Seconds(), "snapshot_write_s")
	b.ReportMetric(ready1m, "ready_1m_s_extrapolated")
	b.ReportMetric(rebuild1m, "rebuild_1m_s_extrapolated")
	for _, p := range points {
		b.Logf("%d machines, %d events in the log: from zero in %s; from a snapshot in %s (%.2f µs/machine), and with %d events after it in %s (%.1f× faster than from zero); "+
			"snapshot %.0f bytes/machine, written in %s; %.0f bytes of heap/machine",
			p.machines, p.eventsInLog, p.rebuild.Round(time.Millisecond), p.restore.Round(time.Millisecond), p.restore.Seconds()*1e6/float64(p.machines),
			tail, p.ready.Round(time.Millisecond), p.rebuild.Seconds()/p.ready.Seconds(), p.snapshotBytes, p.write.Round(time.Millisecond), p.heapBytes)
	}
	b.Logf("extrapolated to 1,000,000 machines: ready in %.1fs (from a snapshot: %.1fs by the line through the sizes, %.1fs in proportion to the full size; "+
		"then %s of catching up), rebuilt in %.1fs (line %.1fs, in proportion %.1fs)", ready1m, restoreAt(million), scale*last.restore.Seconds(),
		catchUp.Round(time.Millisecond), rebuild1m, rebuildAt(million), scale*last.rebuild.Seconds())
}

// fitLine is the least-squares line through the points' (machines, y).
func fitLine(points []restartPoint, y func(restartPoint) float64) func(machines float64) float64 {
	var sx, sy, sxx, sxy float64
	for _, p := range points {
		x := float64(p.machines)
		sx, sy, sxx, sxy = sx+x, sy+y(p), sxx+x*x, sxy+x*y(p)
	}
	n := float64(len(points))
	slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	intercept := (sy - slope*sx) / n
	return func(machines float64) float64 { return intercept + slope*machines }
}
