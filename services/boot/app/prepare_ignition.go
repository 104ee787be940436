package app

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

var (
	prepared = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_prepared_total",
		Help: "Machine revisions rendered ahead of the boot, when a machine was targeted: rendered, skipped (nothing to boot), failed, dropped (queue full).",
	}, []string{"result"})
	prepareQueue = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_boot_ignition_prepare_queue",
		Help: "Machines waiting for their Ignition to be rendered ahead of the boot.",
	})
)

// PrepareIgnition renders a machine's Ignition into the cache ahead of its
// boot: a machine is targeted with a revision while its firmware sleeps in
// the wait loop, so by the time it asks, its render is done and a rack
// that was assigned at once does not render at once.
//
// The machine is read as of the event that triggered this (seq), rebuilt
// from the log: the registry's projection may not have applied it yet.
func (a *App) PrepareIgnition(ctx context.Context, org, uuid string, seq uint64) error {
	m, err := a.Registry.GetMachineAt(ctx, org, uuid, seq)
	if err != nil {
		if errs.Is(err, errs.KindNotFound) {
			prepared.WithLabelValues("skipped").Inc()
			return nil
		}
		prepared.WithLabelValues("failed").Inc()
		return err
	}
	if waitReason(m) != "" {
		prepared.WithLabelValues("skipped").Inc()
		return nil
	}
	if _, err := a.Renderer.Ignition(ctx, IgnitionRequest{Org: org, Pool: m.Pool, Revision: m.TargetRevision, Hostname: hostname(m), Labels: m.Labels}); err != nil {
		prepared.WithLabelValues("failed").Inc()
		return err
	}
	prepared.WithLabelValues("rendered").Inc()
	return nil
}

// Preparer queues machines whose Ignition should be rendered ahead of their
// boot and renders them with a few workers, so that it never takes more
// than those from the requests being served. A machine queued twice is
// rendered once; when the queue is full, a machine is dropped (it is
// rendered when it asks).
type Preparer struct {
	app *App
	max int

	mu      sync.Mutex
	queued  map[[2]string]uint64 // machine -> sequence of its latest event
	order   [][2]string
	wake    chan struct{}
	pending int // queued or being rendered
}

// NewPreparer returns a preparer holding at most max machines.
func NewPreparer(a *App, max int) *Preparer {
	return &Preparer{app: a, max: max, queued: map[[2]string]uint64{}, wake: make(chan struct{}, 1)}
}

// Enqueue asks for a machine's Ignition to be rendered as the machine is
// after the event at sequence seq.
func (p *Preparer) Enqueue(org, uuid string, seq uint64) {
	k := [2]string{org, uuid}
	p.mu.Lock()
	_, queued := p.queued[k]
	switch {
	case queued:
		p.queued[k] = max(p.queued[k], seq)
	case len(p.order) >= p.max:
		prepared.WithLabelValues("dropped").Inc()
	default:
		p.queued[k] = seq
		p.order = append(p.order, k)
		p.pending++
		prepareQueue.Inc()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of machines queued or being rendered.
func (p *Preparer) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

// Run renders queued machines with workers goroutines until ctx ends.
func (p *Preparer) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				k, seq, ok := p.next()
				if !ok {
					select {
					case <-ctx.Done():
						return
					case <-p.wake:
						continue
					}
				}
				if err := p.app.PrepareIgnition(ctx, k[0], k[1], seq); err != nil && ctx.Err() == nil {
					p.app.Log.DebugContext(ctx, "Ignition not rendered ahead; it will be when the machine asks", "org", k[0], "uuid", k[1], "err", err)
				}
				p.mu.Lock()
				p.pending--
				p.mu.Unlock()
				prepareQueue.Dec()
			}
		})
	}
	wg.Wait()
}

func (p *Preparer) next() ([2]string, uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) == 0 {
		return [2]string{}, 0, false
	}
	k := p.order[0]
	p.order = p.order[1:]
	seq := p.queued[k]
	delete(p.queued, k)
	if len(p.order) > 0 {
		select {
		case p.wake <- struct{}{}: // let another worker take the next one
		default:
		}
	}
	return k, seq, true
}
