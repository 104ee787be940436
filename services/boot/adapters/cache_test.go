package adapters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/boot/app"
)

func counting(delay time.Duration) (func(context.Context, app.IgnitionRequest) (app.Rendered, error), *atomic.Int64) {
	var n atomic.Int64
	return func(_ context.Context, q app.IgnitionRequest) (app.Rendered, error) {
		n.Add(1)
		time.Sleep(delay)
		if q.Hostname == "broken" {
			return app.Rendered{}, errors.New("render failed")
		}
		return app.Rendered{MachineRevisionID: "mr-" + q.Hostname, Ignition: make([]byte, 1000)}, nil
	}, &n
}

func req(org, host string) app.IgnitionRequest {
	return app.IgnitionRequest{Org: org, Pool: "workers", Revision: 1, Hostname: host, Labels: map[string]string{"a": "b"}}
}

func TestIgnitionCacheSharesConcurrentMisses(t *testing.T) {
	render, n := counting(20 * time.Millisecond)
	c := NewIgnitionCache(render, 1<<20, time.Hour)
	defer c.Close()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			r, err := c.Ignition(context.Background(), req("acme", "h1"))
			if err != nil || r.MachineRevisionID != "mr-h1" {
				t.Errorf("%+v %v", r, err)
			}
		})
	}
	wg.Wait()
	if n.Load() != 1 {
		t.Errorf("%d renders for one machine revision, want 1", n.Load())
	}
	// Labels are part of the key, in any order.
	q := req("acme", "h1")
	q.Labels = map[string]string{"a": "c"}
	c.Ignition(context.Background(), q)
	if n.Load() != 2 {
		t.Errorf("other labels were served from the cache")
	}
}

func TestIgnitionCacheBoundsTTLAndInvalidation(t *testing.T) {
	render, n := counting(0)
	c := NewIgnitionCache(render, 10*1200, time.Hour)
	defer c.Close()
	now := time.Now()
	c.now = func() time.Time { return now }
	ctx := context.Background()
	for i := range 20 {
		c.Ignition(ctx, req("acme", fmt.Sprint("h", i)))
	}
	if c.Len() > 10 {
		t.Errorf("%d entries kept, bound is about 10", c.Len())
	}
	before := n.Load()
	c.Ignition(ctx, req("acme", "h19")) // most recent: still there
	if n.Load() != before {
		t.Error("the most recent entry was evicted")
	}
	now = now.Add(2 * time.Hour)
	c.Ignition(ctx, req("acme", "h19"))
	if n.Load() != before+1 {
		t.Error("an expired entry was served")
	}
	c.Ignition(ctx, req("other", "h19"))
	c.InvalidateOrg("acme")
	before = n.Load()
	c.Ignition(ctx, req("acme", "h19"))
	c.Ignition(ctx, req("other", "h19"))
	if n.Load() != before+1 {
		t.Errorf("invalidation: %d renders, want 1 (acme only)", n.Load()-before)
	}
	if _, err := c.Ignition(ctx, req("acme", "broken")); err == nil {
		t.Error("error not returned")
	}
	before = n.Load()
	c.Ignition(ctx, req("acme", "broken"))
	if n.Load() != before+1 {
		t.Error("an error was cached")
	}
}

func TestIgnitionCacheDropsRendersInvalidatedMidway(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	c := NewIgnitionCache(func(context.Context, app.IgnitionRequest) (app.Rendered, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
		return app.Rendered{MachineRevisionID: "mr-x", Ignition: []byte("{}")}, nil
	}, 1<<20, time.Hour)
	defer c.Close()
	done := make(chan struct{})
	go func() { c.Ignition(context.Background(), req("acme", "h")); close(done) }()
	<-started
	c.InvalidateOrg("acme") // e.g. the bootstrap token was rotated
	close(release)
	<-done
	c.Ignition(context.Background(), req("acme", "h"))
	if calls.Load() != 2 {
		t.Error("a render begun before the invalidation was cached")
	}
}

func TestHubWakesWaiters(t *testing.T) {
	h := newHub()
	ch1, stop1 := h.wait("acme.a")
	ch2, stop2 := h.wait("acme.b")
	defer stop1()
	defer stop2()
	h.notify("acme.a")
	select {
	case <-ch1:
	case <-time.After(time.Second):
		t.Fatal("waiter not woken")
	}
	select {
	case <-ch2:
		t.Fatal("the wrong waiter was woken")
	default:
	}
	h.notifyAll()
	<-ch2
	h.notify("acme.a") // no waiters left: nothing happens
}
