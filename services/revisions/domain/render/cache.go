package render

import (
	"container/list"
	"sync"

	"golang.org/x/sync/singleflight"
)

// Cache renders each input once and keeps the results: revisions are
// immutable, so a key (Input.Key) always maps to the same bytes. It is
// bounded by total size (least recently used entries go first), and
// concurrent misses for one key share a single render, so a rack that
// powers on at once costs one render per machine revision, not one per
// request. Errors are not cached.
type Cache struct {
	render    func(Input) ([]byte, error)
	templates *Templates // nil: render renders in full
	maxBytes  int64
	group     singleflight.Group

	mu    sync.Mutex
	size  int64
	order *list.List // front: most recently used
	items map[string]*list.Element
	stats CacheStats
}

// CacheStats are counters for metrics.
type CacheStats struct {
	Hits, Misses, Renders, Evictions uint64
	Entries                          int
	Bytes                            int64
	// Templates are the pool revision templates that renders specialise
	// (TemplateRenders of them went through Butane).
	Templates       int
	TemplateRenders uint64
}

type cacheEntry struct {
	key string
	val []byte
}

// NewCache returns a cache holding at most maxBytes of rendered configs
// (a config is roughly 10-20 KiB, so 64 MiB holds thousands). A miss
// specialises its pool revision's template (Templates): Butane runs once
// per pool revision, not once per machine.
func NewCache(maxBytes int64) *Cache {
	ts := NewTemplates(maxTemplates)
	c := newCache(maxBytes, ts.Render)
	c.templates = ts
	return c
}

// maxTemplates bounds the templates a cache keeps: one per pool revision
// (and join material and options) that machines boot.
const maxTemplates = 1024

func newCache(maxBytes int64, render func(Input) ([]byte, error)) *Cache {
	return &Cache{render: render, maxBytes: maxBytes, order: list.New(), items: map[string]*list.Element{}}
}

// Render returns the config for in, rendering it at most once. The
// returned slice is the caller's own copy.
func (c *Cache) Render(in Input) ([]byte, error) {
	key := in.Key()
	if b, ok := c.get(key); ok {
		return b, nil
	}
	v, err, _ := c.group.Do(key, func() (any, error) {
		// Another caller may have filled it between our miss and Do.
		if b, ok := c.peek(key); ok {
			return b, nil
		}
		b, err := c.render(in)
		if err != nil {
			return nil, err
		}
		c.put(key, b)
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	return clone(v.([]byte)), nil
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = len(c.items)
	s.Bytes = c.size
	if c.templates != nil {
		ts := c.templates.Stats()
		s.Templates, s.TemplateRenders = ts.Entries, ts.Renders
	}
	return s
}

func (c *Cache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		c.stats.Hits++
		return clone(e.Value.(*cacheEntry).val), true
	}
	c.stats.Misses++
	return nil, false
}

func (c *Cache) peek(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		return e.Value.(*cacheEntry).val, true
	}
	return nil, false
}

func (c *Cache) put(key string, val []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Renders++
	if int64(len(val)) > c.maxBytes {
		return // larger than the whole cache: serve it, don't keep it
	}
	if _, ok := c.items[key]; ok {
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, val: val})
	c.size += int64(len(val))
	for c.size > c.maxBytes {
		last := c.order.Back()
		e := last.Value.(*cacheEntry)
		c.order.Remove(last)
		delete(c.items, e.key)
		c.size -= int64(len(e.val))
		c.stats.Evictions++
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
