package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

var lastIgnitionsPending = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "anvil_boot_last_ignition_pending",
	Help: "Machines whose latest Ignition run waits to be recorded in the registry.",
})

// LastIgnitions records machines' Ignition runs in the registry
// (machine.RecordIgnition, which appends an event) off the request path:
// /ignition queues the run and answers, and a few workers record the
// latest run of each queued machine. Recording was best effort already (a
// failure never kept a machine from booting); now it is also not what a
// rack that boots at once waits for.
type LastIgnitions struct {
	mu      sync.Mutex
	pending map[machineRef]time.Time
	wake    chan struct{}
}

// NewLastIgnitions returns an empty queue.
func NewLastIgnitions() *LastIgnitions {
	return &LastIgnitions{pending: map[machineRef]time.Time{}, wake: make(chan struct{}, 1)}
}

// Queue queues machine uuid's Ignition run at `at`.
func (l *LastIgnitions) Queue(org, uuid string, at time.Time) {
	ref := machineRef{org, uuid}
	l.mu.Lock()
	if prev, ok := l.pending[ref]; !ok || at.After(prev) {
		if !ok {
			lastIgnitionsPending.Inc()
		}
		l.pending[ref] = at
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of machines waiting to be recorded.
func (l *LastIgnitions) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

func (l *LastIgnitions) take() (machineRef, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ref, at := range l.pending {
		delete(l.pending, ref)
		lastIgnitionsPending.Dec()
		return ref, at, true
	}
	return machineRef{}, time.Time{}, false
}

// lastIgnitionWorkers bound the registry calls recording runs at once.
const lastIgnitionWorkers = 4

// Run records the queued runs through a's registry until ctx ends, then
// what is still queued (best effort, briefly).
func (l *LastIgnitions) Run(ctx context.Context, a *App) {
	record := func(ctx context.Context) {
		for {
			ref, at, ok := l.take()
			if !ok {
				return
			}
			if err := a.Registry.Command(ctx, ref.org, ref.uuid, regapi.RecordIgnition{At: at}); err != nil {
				recordFailures.WithLabelValues("last_ignition").Inc()
				a.Log.WarnContext(ctx, "Last Ignition not recorded", "org", ref.org, "uuid", ref.uuid, "err", err)
			}
		}
	}
	var wg sync.WaitGroup
	for range lastIgnitionWorkers {
		wg.Go(func() {
			for {
				record(ctx)
				select {
				case <-ctx.Done():
					return
				case <-l.wake:
					// Pass the wake-up on only while work is queued: passing
					// it on unconditionally kept the workers spinning.
					if l.Pending() > 0 {
						select {
						case l.wake <- struct{}{}:
						default:
						}
					}
				}
			}
		})
	}
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	record(fctx)
}
