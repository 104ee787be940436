package adapters

import (
	"container/list"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// DefaultRecordCacheEntries bounds the records a replica keeps in memory
// (about a kilobyte each): size it to the fleet, as every agent request
// reads its machine's record.
const DefaultRecordCacheEntries = 50_000

var recordReads = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_boot_record_reads_total",
	Help: "Boot record reads, by where they were answered from: cache (this replica's memory, kept current by the bucket's watch) or store (the KV bucket).",
}, []string{"from"})

// The two series, made once: every agent request counts one of them.
var (
	readsFromCache = recordReads.WithLabelValues("cache")
	readsFromStore = recordReads.WithLabelValues("store")
)

// recordCache keeps the records this replica read or wrote, the most
// recently used first, while the bucket's watch runs: every agent request
// reads its machine's record to check its credential, and at 10,000
// machines those reads were the boot service's busiest round trips to the
// server. The watch removes a key's record when any replica changes it, so
// a record another replica changed is served from memory only until the
// watch delivers the change (the same lag as a long poll's wake-up), and
// an update still compares and swaps on the stored revision. Without a
// watch (not started yet, re-established, stopped) nothing is served from
// memory: changes made meanwhile are not delivered.
type recordCache struct {
	mu      sync.Mutex
	max     int
	live    bool   // the watch is established
	epoch   uint64 // bumped whenever the watch starts or stops
	entries map[string]*list.Element
	order   *list.List // of *cachedRecord, most recently used first
	reads   map[string]*storeRead
}

type cachedRecord struct {
	key string
	rec record.Record
}

// storeRead is the reads of a key from the store under way, and the
// newest revision of it the watch delivered meanwhile: a read may have
// been answered before that change.
type storeRead struct {
	n    int
	seen uint64
}

// readTicket is what a read from the store must still match to be kept.
type readTicket struct {
	live  bool
	epoch uint64
}

func newRecordCache(max int) *recordCache {
	return &recordCache{max: max, entries: map[string]*list.Element{}, order: list.New(), reads: map[string]*storeRead{}}
}

// get returns a copy of the cached record of key.
func (c *recordCache) get(key string) (record.Record, bool) {
	if c.max <= 0 {
		return record.Record{}, false
	}
	c.mu.Lock()
	el, ok := c.entries[key]
	ok = ok && c.live
	var r record.Record
	if ok {
		c.order.MoveToFront(el)
		r = el.Value.(*cachedRecord).rec.Clone()
	}
	c.mu.Unlock()
	if ok {
		readsFromCache.Inc()
	}
	return r, ok
}

// begin notes a read of key from the store; end must follow.
func (c *recordCache) begin(key string) readTicket {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.reads[key]
	if p == nil {
		p = &storeRead{}
		c.reads[key] = p
	}
	p.n++
	return readTicket{live: c.live, epoch: c.epoch}
}

// end closes a read begun with t and keeps its record (read; nil when
// the read failed) unless the watch delivered a newer change meanwhile,
// the watch restarted, or a newer record is held.
func (c *recordCache) end(t readTicket, key string, read *record.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var seen uint64
	if p := c.reads[key]; p != nil {
		seen = p.seen
		if p.n--; p.n <= 0 {
			delete(c.reads, key)
		}
	}
	if read == nil || !t.live || !c.live || t.epoch != c.epoch || seen > read.Revision {
		return
	}
	c.keep(key, *read)
}

// wrote keeps a record this replica stored (with its new revision).
func (c *recordCache) wrote(key string, r record.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		c.keep(key, r)
	}
}

// keep stores a copy of r unless a newer revision is held; c.mu is held.
func (c *recordCache) keep(key string, r record.Record) {
	if c.max <= 0 {
		return
	}
	if el, ok := c.entries[key]; ok {
		held := el.Value.(*cachedRecord)
		if held.rec.Revision > r.Revision {
			return
		}
		held.rec = r.Clone()
		c.order.MoveToFront(el)
		return
	}
	c.entries[key] = c.order.PushFront(&cachedRecord{key: key, rec: r.Clone()})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*cachedRecord).key)
	}
}

// changed is the watch's news that key is at revision rev.
func (c *recordCache) changed(key string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.reads[key]; p != nil {
		p.seen = max(p.seen, rev)
	}
	if el, ok := c.entries[key]; ok && el.Value.(*cachedRecord).rec.Revision < rev {
		c.order.Remove(el)
		delete(c.entries, key)
	}
}

// forget drops key's record: an update found it stale.
func (c *recordCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.order.Remove(el)
		delete(c.entries, key)
	}
}

// watching says whether the watch is established; either way what was
// cached is dropped.
func (c *recordCache) watching(live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = live
	c.epoch++
	clear(c.entries)
	c.order.Init()
}

// len is how many records are held.
func (c *recordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
