package eventstest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

func TestSyncBuffer(t *testing.T) {
	var b eventstest.SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { fmt.Fprint(&b, "ab") })
	}
	wg.Wait()
	if got := b.String(); len(got) != 16 {
		t.Fatalf("String: %q", got)
	}
	if got := b.Tail(3); got != "bab" {
		t.Fatalf("Tail(3): %q", got)
	}
	if got := b.Tail(100); len(got) != 16 {
		t.Fatalf("Tail(100): %q", got)
	}
}

func TestRunService(t *testing.T) {
	ready := make(chan struct{})
	var stopped atomic.Bool
	stop := eventstest.RunService(t, "svc", func(ctx context.Context) error {
		close(ready)
		<-ctx.Done()
		stopped.Store(true)
		return nil
	}, func() { <-ready }, eventstest.RunOptions{StartTimeout: 10 * time.Second, StopTimeout: 10 * time.Second})
	stop()
	stop() // once only
	if !stopped.Load() {
		t.Fatal("stop did not wait for the service to return")
	}
}

func TestEventually(t *testing.T) {
	n := 0
	eventstest.Eventually(t, "three calls", 10*time.Second, time.Millisecond, func() (bool, string) {
		n++
		return n == 3, fmt.Sprint(n)
	})
	if n != 3 {
		t.Fatalf("cond called %d times", n)
	}
}

func TestParallel(t *testing.T) {
	var seen [100]atomic.Int32
	if _, err := eventstest.Parallel(len(seen), 4, func(i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("fn(%d) called %d times", i, c)
		}
	}
	boom := errors.New("boom")
	if _, err := eventstest.Parallel(10, 2, func(i int) error {
		if i == 5 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestPollWait(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name                 string
		interval, took, left time.Duration
		want                 time.Duration
	}{
		{"a cheap check waits the interval", 50 * ms, 1 * ms, time.Minute, 50 * ms},
		{"a costly check waits four times its cost", 50 * ms, 200 * ms, time.Minute, 800 * ms},
		{"not past the deadline", 50 * ms, 200 * ms, 300 * ms, 300 * ms},
		{"at the deadline, the interval", 50 * ms, 200 * ms, 10 * ms, 50 * ms},
		{"past the deadline, the interval", 50 * ms, 200 * ms, -time.Second, 50 * ms},
	} {
		if got := eventstest.PollWait(c.interval, c.took, c.left); got != c.want {
			t.Errorf("%s: PollWait(%s, %s, %s) = %s, want %s", c.name, c.interval, c.took, c.left, got, c.want)
		}
	}
}
