package eventstest

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect opens another connection to e's server for t, closed at t's
// cleanup: a service under test gets its own, as it would in production.
func (e *Env) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := e.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// SyncBuffer is a bytes.Buffer that is safe for concurrent use: services'
// loggers (or a subprocess) write to it from their own goroutines while a
// test reads it. The zero value is ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n bytes written (all of them if there are fewer).
func (b *SyncBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.buf.Bytes(); len(p) > n {
		return string(p[len(p)-n:])
	}
	return b.buf.String()
}

// RunOptions are RunService's timeouts and what it prints when a service
// fails to start.
type RunOptions struct {
	// StartTimeout bounds the wait for ready.
	StartTimeout time.Duration
	// StopTimeout bounds the wait for the service to return once its
	// context is cancelled.
	StopTimeout time.Duration
	// Logs, if set, are printed when the service returns before it is
	// ready.
	Logs fmt.Stringer
}

// RunService starts a service for t: fn runs in its own goroutine with a
// context that stop cancels, and RunService returns once ready has
// returned (ready typically receives the service from its ready channel, or
// polls until it answers). It fails t if fn returns first or ready does
// not return within o.StartTimeout. stop cancels the context and waits up
// to o.StopTimeout for fn to return, reporting its error; it runs once
// however often it is called, and at t's cleanup.
func RunService(t testing.TB, name string, fn func(context.Context) error, ready func(), o RunOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	waited := make(chan struct{})
	go func() { ready(); close(waited) }()
	select {
	case <-waited:
	case err := <-done:
		if o.Logs != nil {
			t.Fatalf("%s stopped at start: %v\n%s", name, err, o.Logs.String())
		}
		t.Fatalf("%s stopped at start: %v", name, err)
	case <-time.After(o.StartTimeout):
		t.Fatalf("%s did not start", name)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(o.StopTimeout):
				// What it waits on is the only clue a rare hang leaves.
				stacks := make([]byte, 1<<20)
				stacks = stacks[:runtime.Stack(stacks, true)]
				t.Errorf("%s did not stop within %s; the process's goroutines:\n%s", name, o.StopTimeout, stacks)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Eventually calls cond every interval until it reports true, and fails t
// once d has passed without, with what and the last state cond reported.
// d is a deadline for waiting, not an assertion on how long anything takes.
// A check that is itself costly (listing 10,000 machines) waits at least
// PollCostFactor times its own duration before the next, so that the
// waiting takes a small share of the CPU it waits for.
func Eventually(t testing.TB, what string, d, interval time.Duration, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		began := time.Now()
		ok, state := cond()
		if ok {
			return
		}
		last = state
		now := time.Now()
		if now.After(deadline) {
			t.Fatalf("%s: not within %s; last state: %s", what, d, last)
		}
		time.Sleep(PollWait(interval, now.Sub(began), deadline.Sub(now)))
	}
}

// PollCostFactor is how many times its own duration a polled check waits
// at least before it is made again.
const PollCostFactor = 4

// PollWait is the wait before the next poll: interval, or PollCostFactor
// times what the last check took when that is longer, but not past the
// deadline (left from now) when interval would not be.
func PollWait(interval, took, left time.Duration) time.Duration {
	wait := max(interval, PollCostFactor*took)
	if wait > left {
		wait = max(left, interval)
	}
	return wait
}

// Parallel calls fn(i) for every i in [0, n) on workers goroutines, each
// taking the next i until none is left or its call fails. It returns the
// wall time of the whole run, or the first error.
func Parallel(n, workers int, fn func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// WaitConsumersCaughtUp waits (at most within) until every consumer of
// stream has delivered and had acknowledged every message: a benchmark
// calls it after its setup, so that neither side of a comparison pays for
// the services' catching up with the setup's events.
func WaitConsumersCaughtUp(t testing.TB, js jetstream.JetStream, stream string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, "every consumer of "+stream+" caught up", within, 50*time.Millisecond, func() (bool, string) {
		pending := 0
		for ci := range st.ListConsumers(ctx).Info() {
			pending += int(ci.NumPending) + ci.NumAckPending
		}
		return pending == 0, fmt.Sprintf("%d messages pending", pending)
	})
}
