package render

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func TestCacheRendersOnce(t *testing.T) {
	var renders atomic.Int32
	release := make(chan struct{})
	c := newCache(1<<20, func(in Input) ([]byte, error) {
		renders.Add(1)
		<-release // hold every render until all callers are waiting
		return Render(in)
	})
	in := testInput(t, shapes()["dhcp"], "node-1", nil)

	const callers = 64
	var wg sync.WaitGroup
	results := make([][]byte, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.Render(in)
		}()
	}
	// Wait until the callers have missed, then let the one render finish.
	for c.Stats().Misses < callers {
		runtimeGosched()
	}
	close(release)
	wg.Wait()
	if n := renders.Load(); n != 1 {
		t.Fatalf("rendered %d times for one key", n)
	}
	for i := range callers {
		if errs[i] != nil || !bytes.Equal(results[i], results[0]) {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	// Callers own their copy.
	results[0][0] = 'X'
	again, _ := c.Render(in)
	if again[0] == 'X' {
		t.Fatal("cache handed out its own buffer")
	}
	s := c.Stats()
	if s.Renders != 1 || s.Hits != 1 || s.Entries != 1 || s.Bytes != int64(len(again)) {
		t.Fatalf("stats = %+v", s)
	}
}

func TestCacheKeyCoversInputs(t *testing.T) {
	var renders atomic.Int32
	c := newCache(1<<20, func(in Input) ([]byte, error) { renders.Add(1); return Render(in) })
	base := testInput(t, shapes()["dhcp"], "node-1", nil)
	variants := []Input{base}
	other := testInput(t, shapes()["static"], "node-1", nil)
	variants = append(variants, other)
	host := testInput(t, shapes()["dhcp"], "node-2", nil)
	variants = append(variants, host)
	tok := base
	tok.Join.BootstrapToken = "zzzzzz.zzzzzzzzzzzzzzzz"
	variants = append(variants, tok)
	opt := base
	opt.Options.AgentURL += "-v2"
	variants = append(variants, opt)
	keys := map[string]bool{}
	for i, in := range variants {
		if _, err := c.Render(in); err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		keys[in.Key()] = true
	}
	if len(keys) != len(variants) || int(renders.Load()) != len(variants) {
		t.Fatalf("%d keys, %d renders for %d distinct inputs", len(keys), renders.Load(), len(variants))
	}
}

func TestCacheBoundedAndErrorsNotCached(t *testing.T) {
	var calls atomic.Int32
	fail := true
	c := newCache(250, func(in Input) ([]byte, error) {
		calls.Add(1)
		if fail {
			return nil, errors.New("boom")
		}
		return bytes.Repeat([]byte{'x'}, 100), nil
	})
	in := testInput(t, shapes()["dhcp"], "node-1", nil)
	if _, err := c.Render(in); err == nil {
		t.Fatal("error swallowed")
	}
	fail = false
	if _, err := c.Render(in); err != nil || calls.Load() != 2 {
		t.Fatalf("error was cached: %v, %d calls", err, calls.Load())
	}
	for i := range 5 {
		c.Render(testInput(t, shapes()["dhcp"], fmt.Sprintf("node-%d", i+2), nil))
	}
	s := c.Stats()
	if s.Bytes > 250 || s.Entries != 2 || s.Evictions != 4 {
		t.Fatalf("stats = %+v", s)
	}
	// The most recently used entry survived.
	before := calls.Load()
	c.Render(testInput(t, shapes()["dhcp"], "node-6", nil))
	if calls.Load() != before {
		t.Fatal("most recent entry was evicted")
	}
}

func BenchmarkRenderFirst(b *testing.B) {
	in := testInput(b, shapes()["bond-vlan-bridge"], "node-1.rack12.example", map[string]string{"anvil.dev/slot": "7"})
	b.ReportAllocs()
	for b.Loop() {
		// A fresh cache every time: this is the uncached path.
		if _, err := NewCache(1 << 20).Render(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
	b.Logf("%d renders, each with a fresh cache, in %s", b.N, b.Elapsed())
}

func BenchmarkRenderCached(b *testing.B) {
	in := testInput(b, shapes()["bond-vlan-bridge"], "node-1.rack12.example", map[string]string{"anvil.dev/slot": "7"})
	c := NewCache(1 << 20)
	if _, err := c.Render(in); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Render(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
	b.Logf("%d renders served from the cache after one render, in %s", b.N, b.Elapsed())
}
