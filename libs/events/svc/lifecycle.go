package svc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/projection"
)

// lifecycle is what every service runs beside its requests: projections,
// event routers and loops, the steps that stop it taking work, and the
// first error of anything that stopped on its own.
type lifecycle struct {
	ctx    context.Context // background work's; see Runtime.Background
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	failed      chan struct{} // closed with the first failure
	failure     error
	projections []*projection.Runner
	routers     []*handler.Router
	stops       []func()
}

func (l *lifecycle) init(ctx context.Context) {
	// Background work keeps the caller's values (actor, trace) but not its
	// cancellation: when ctx ends, requests in flight may still wait for a
	// projection, so background work stops only after the listeners.
	l.ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.failed = make(chan struct{})
}

func (l *lifecycle) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil {
		l.failure = err
		close(l.failed)
	}
}

// Background is the context of the service's background work. It ends
// when Wait stops the service, after the service has stopped taking
// requests, not when the context the service was started with ends.
func (rt *Runtime) Background() context.Context { return rt.life.ctx }

// Go runs fn in the background until the service stops. An error fn
// returns before then stops the service: Wait returns it, named. A nil
// return ends only fn.
func (rt *Runtime) Go(name string, fn func(ctx context.Context) error) {
	l := &rt.life
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		err := fn(l.ctx)
		if err != nil && l.ctx.Err() == nil {
			l.fail(fmt.Errorf("%s stopped: %w", name, err))
		}
	}()
}

// Project runs each projection in the background, with a readiness check
// "projection <name>" that fails while it catches up with the log.
func (rt *Runtime) Project(runners ...*projection.Runner) {
	for _, r := range runners {
		rt.life.mu.Lock()
		rt.life.projections = append(rt.life.projections, r)
		rt.life.mu.Unlock()
		rt.Health.Add("projection "+r.Name(), func(context.Context) error {
			if !r.Live() {
				return fmt.Errorf("catching up with the event log (%d events behind)", r.Lag())
			}
			return nil
		})
		rt.Go("projection "+r.Name(), func(ctx context.Context) error {
			err := r.Run(ctx)
			if err == nil && ctx.Err() == nil {
				err = errors.New("ended without being stopped")
			}
			return err
		})
	}
}

// HandleEvents runs an event router in the background, with the
// readiness check "handlers" that fails until it runs. The router is
// closed when the service stops.
func (rt *Runtime) HandleEvents(r *handler.Router) {
	rt.life.mu.Lock()
	rt.life.routers = append(rt.life.routers, r)
	rt.life.mu.Unlock()
	rt.Health.Add("handlers", func(context.Context) error {
		select {
		case <-r.Running():
			return nil
		default:
			return errors.New("event handlers are not running yet")
		}
	})
	rt.Go("event handlers", func(ctx context.Context) error {
		err := r.Run(ctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("ended without being stopped")
		}
		return err
	})
}

// CatchUp blocks until every projection has caught up with the log as it
// was when it started and every event router runs, and reports true. It
// reports false when ctx ends or background work fails first; the caller
// then returns rt.Wait(ctx), which stops the service and says why.
func (rt *Runtime) CatchUp(ctx context.Context) bool {
	l := &rt.life
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.failed:
			cancel()
		case <-ctx.Done():
		}
	}()
	l.mu.Lock()
	runners, routers := append([]*projection.Runner(nil), l.projections...), append([]*handler.Router(nil), l.routers...)
	l.mu.Unlock()
	for _, r := range runners {
		if r.WaitLive(ctx) != nil {
			return false
		}
	}
	for _, r := range routers {
		select {
		case <-r.Running():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// failureOr is background work's failure, if there was one, else err.
func (rt *Runtime) failureOr(err error) error {
	rt.life.mu.Lock()
	defer rt.life.mu.Unlock()
	if rt.life.failure != nil {
		return fmt.Errorf("%s: %w", rt.Config.Service, rt.life.failure)
	}
	return err
}

// OnStop adds a step that stops the service taking work (closing a
// command server, shutting an HTTP listener down). Wait runs the steps in
// the order they were added, before background work is cancelled.
func (rt *Runtime) OnStop(step func()) {
	rt.life.mu.Lock()
	defer rt.life.mu.Unlock()
	rt.life.stops = append(rt.life.stops, step)
}

// ServeCommands serves the service's commands and queries in its queue
// group: register adds the handlers to the server. The server stops
// taking requests first when the service stops.
func (rt *Runtime) ServeCommands(queue string, concurrency int, register func(*command.Server) error) error {
	srv := command.NewServer(rt.Conn, queue, concurrency, rt.Log)
	if err := register(srv); err != nil {
		srv.Close()
		return fmt.Errorf("%s: %w", rt.Config.Service, err)
	}
	rt.OnStop(srv.Close)
	return nil
}

// Wait blocks until ctx ends or background work fails, then stops the
// service in order: the steps added with OnStop (no new requests; those
// in flight finish), then background work (its context is cancelled and
// every router closed), waiting until all of it has returned. It returns
// the failure that stopped the service, or nil when ctx ended.
func (rt *Runtime) Wait(ctx context.Context) error {
	l := &rt.life
	select {
	case <-ctx.Done():
	case <-l.failed:
		rt.Log.Error("stopping: background work failed", "err", l.failure)
	}
	rt.stop()
	return rt.failureOr(nil)
}

// stop is Wait's shutdown, also run by Close for a service that never
// reached Wait (it failed while starting).
func (rt *Runtime) stop() {
	l := &rt.life
	l.mu.Lock()
	stops := l.stops
	l.stops = nil
	routers := l.routers
	l.mu.Unlock()
	for _, s := range stops {
		s()
	}
	l.cancel()
	for _, r := range routers {
		_ = r.Close()
	}
	l.wg.Wait()
}

// InstanceID is a random name for a replica that was given none: its
// projection consumers and leases are its own.
func InstanceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
