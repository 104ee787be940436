package app

import (
	"context"
	"sync"
	"time"
)

// driverSet is the drivers running in this replica, by rollout.
type driverSet struct {
	mu sync.Mutex
	m  map[string]*driver
}

func (s *driverSet) add(org, id string, d *driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*driver{}
	}
	s.m[org+"/"+id] = d
}

func (s *driverSet) remove(org, id string, d *driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[org+"/"+id] == d {
		delete(s.m, org+"/"+id)
	}
}

func (s *driverSet) get(org, id string) *driver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[org+"/"+id]
}

// Driving lists the rollouts ("<org>/<id>") whose driver runs in this
// replica now.
func (a *App) Driving() []string {
	a.drivers.mu.Lock()
	defer a.drivers.mu.Unlock()
	out := make([]string, 0, len(a.drivers.m))
	for k := range a.drivers.m {
		out = append(out, k)
	}
	return out
}

// RolloutEvent tells the replica that an event was appended to a rollout
// (seen on the bus): its driver, if it runs here, reads it, and whoever
// waits on the rollout wakes up.
func (a *App) RolloutEvent(org, id, eventID string) {
	if d := a.drivers.get(org, id); d != nil {
		select {
		case d.external <- eventID:
		default: // full: the driver is busy and will read the log anyway
		}
	}
}

// job is a piece of work that one replica at a time drives.
type job struct{ org, id string }

// Supervise runs a driver for every active rollout and every running
// machine operation whose lease this replica gets, until ctx ends. Another
// replica's lease is left alone: if that replica dies, its lease runs out
// and one of the others takes over.
func (a *App) Supervise(ctx context.Context, every time.Duration) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.supervise(ctx, every, newRolloutsKey, "", func() []job {
			var out []job
			for _, s := range a.Rollouts.Active() {
				out = append(out, job{s.Org, s.State.ID})
			}
			return out
		}, a.Drive)
	}()
	go func() {
		defer wg.Done()
		if a.Operations == nil {
			return
		}
		a.supervise(ctx, every, newOperationsKey, "op.", func() []job {
			var out []job
			for _, s := range a.Operations.Running() {
				out = append(out, job{s.Org, s.State.ID})
			}
			return out
		}, a.DriveOperation)
	}()
	wg.Wait()
}

func (a *App) supervise(ctx context.Context, every time.Duration, wakeKey, prefix string, list func() []job, drive func(context.Context, string, string) error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	running := map[string]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		wake := a.Notify.C(wakeKey)
		for _, j := range list() {
			key := prefix + j.org + "." + j.id
			mu.Lock()
			busy := running[key]
			mu.Unlock()
			if busy {
				continue
			}
			lost, release, ok, err := a.Leases.Acquire(ctx, key)
			if err != nil {
				if ctx.Err() == nil {
					a.Log.Warn("taking a lease failed", "key", key, "err", err)
				}
				continue
			}
			if !ok {
				continue // another replica drives it
			}
			mu.Lock()
			running[key] = true
			mu.Unlock()
			wg.Add(1)
			go func(j job, key string) {
				defer wg.Done()
				dctx, cancel := context.WithCancel(ctx)
				go func() {
					select {
					case <-lost:
						a.Log.Warn("lease lost; stopping its driver", "key", key)
						cancel()
					case <-dctx.Done():
					}
				}()
				err := drive(dctx, j.org, j.id)
				cancel()
				release()
				if err != nil && ctx.Err() == nil {
					a.Log.Warn("driver stopped", "key", key, "err", err)
				}
				mu.Lock()
				delete(running, key)
				mu.Unlock()
			}(j, key)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}

// newRolloutsKey is notified when a rollout appears or becomes active.
const newRolloutsKey = "rollouts/new"

// newOperationsKey is notified when a machine operation appears.
const newOperationsKey = "operations/new"

// NewRolloutsKey is the notifier key for rollouts that appeared.
func NewRolloutsKey() string { return newRolloutsKey }

// NewOperationsKey is the notifier key for machine operations that appeared.
func NewOperationsKey() string { return newOperationsKey }
