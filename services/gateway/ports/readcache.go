package ports

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// readCache keeps the registry's answers to the two hot reads, a machine
// and a page of machines, as the Kubernetes API server's watch cache keeps
// objects: an answer is served again until the registry says that it
// changed. Every registry replica sends a notice (regapi.MachinesChanged)
// a few milliseconds after its read model changes, naming the machines;
// a notice drops their answers and, for a change that is not only a
// heartbeat, every page of their organization.
//
// Three rules keep it from serving what the registry would not:
//   - An answer fetched while a notice for its organization arrived is
//     not kept (it may predate the change the notice names).
//   - A fetch asks the registry for at least the highest position any
//     notice announced (MinVersion), and a caller whose own write is past
//     that position is not served from the cache, so read-your-writes
//     holds: a notice at or past the write has dropped every answer the
//     write changed, and answers kept after it were fetched past it.
//   - Notices are numbered per sender; a gap (a notice lost, a reconnect),
//     a Reset, or a notice of an unknown version forgets everything, and
//     no answer is kept longer than maxAge, which also bounds how old the
//     last_seen in a kept page may be (heartbeats do not drop pages).
type readCache struct {
	maxAge   time.Duration
	maxBytes int
	now      func() time.Time
	log      *slog.Logger
	sub      *nats.Subscription

	mu       sync.RWMutex
	entries  map[string]*readEntry
	pages    map[string]map[string]struct{} // org → keys of its pages
	order    []orderedKey                   // insertion order, for eviction
	bytes    int
	serial   uint64
	orgGen   map[string]uint64 // bumped by every notice naming the org
	pageGen  map[string]uint64 // bumped by every change but heartbeats
	epoch    uint64            // bumped when everything is forgotten
	notified uint64            // the highest Position announced
	senders  map[string]uint64 // instance → last counter
}

type readEntry struct {
	answer rawJSON
	stored time.Time
	size   int
	serial uint64
	org    string
	page   bool
}

type orderedKey struct {
	key    string
	serial uint64
}

// readTicket is what a miss remembers until its answer comes back: the
// cache's generations then, and the MinVersion to ask for.
type readTicket struct {
	key, org   string
	page       bool
	gen, epoch uint64
	notified   uint64 // the notices' position when it was taken
	minVersion uint64
}

// maxReadCacheSenders bounds the senders remembered (registry replicas,
// each restart a new one); past it, everything is forgotten.
const maxReadCacheSenders = 256

var (
	readCacheRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_gateway_read_cache_requests_total",
		Help: "Machine and machine-page reads by how the gateway's read cache answered: hit, miss (asked the registry), or bypass (a read at a past time, a caller whose own write is newer than the notices, a non-canonical UUID).",
	}, []string{"read", "result"})
	readCacheForgets = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_gateway_read_cache_forgets_total",
		Help: "Times the gateway's read cache forgot every answer, by reason: gap (a change notice lost), reset (a registry replica replaced its read model), version (a notice of an unknown version), senders (too many registry replicas remembered).",
	}, []string{"reason"})
	readCacheBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_gateway_read_cache_bytes",
		Help: "Bytes of registry answers the gateway's read cache holds (at most --read-cache-bytes).",
	})
)

// The counters of readCacheRequests, by read (machine, page).
var (
	readsHit      = [2]prometheus.Counter{readCacheRequests.WithLabelValues("machine", "hit"), readCacheRequests.WithLabelValues("page", "hit")}
	readsMissed   = [2]prometheus.Counter{readCacheRequests.WithLabelValues("machine", "miss"), readCacheRequests.WithLabelValues("page", "miss")}
	readsBypassed = [2]prometheus.Counter{readCacheRequests.WithLabelValues("machine", "bypass"), readCacheRequests.WithLabelValues("page", "bypass")}
)

// through answers from the cache, or else calls fetch with the
// MinVersion to ask the registry for (the caller's mark, raised to the
// notices' position) and keeps what it answers.
func (c *readCache) through(ctx context.Context, key, org string, page bool, mark uint64, fetch func(ctx context.Context, minVersion uint64) (any, error)) (any, error) {
	read := 0
	if page {
		read = 1
	}
	a, hit, t := c.get(key, org, page, mark)
	switch {
	case hit:
		readsHit[read].Inc()
		return a, nil
	case mark > t.notified:
		readsBypassed[read].Inc()
	default:
		readsMissed[read].Inc()
	}
	ans, err := fetch(ctx, t.minVersion)
	if raw, ok := ans.(rawJSON); ok && err == nil {
		c.put(t, raw) // fetched at or past every position heard: fit to keep
	}
	return ans, err
}

// newReadCache subscribes to the registry's change notices; nil (no
// cache) when maxBytes or maxAge is not positive or the subscription fails.
func newReadCache(nc *nats.Conn, maxBytes int, maxAge time.Duration, log *slog.Logger) *readCache {
	if nc == nil || maxBytes <= 0 || maxAge <= 0 {
		return nil
	}
	c := &readCache{maxAge: maxAge, maxBytes: maxBytes, now: time.Now, log: log}
	c.forget("")
	sub, err := nc.Subscribe(regapi.SubjectMachinesChanged, func(m *nats.Msg) { c.notice(m.Data) })
	if err != nil {
		log.Warn("no read cache: subscribing to the registry's change notices", "err", err)
		return nil
	}
	// A burst of notices (a registry replaying its log) must not be
	// dropped as a slow consumer; if it is, the gap forgets everything.
	_ = sub.SetPendingLimits(1<<16, 256<<20)
	c.sub = sub
	return c
}

func machineKey(org, uuid string) string { return "m\x00" + org + "\x00" + uuid }

func pageKey(r regapi.MachineList) string {
	return "p\x00" + r.Org + "\x00" + r.Pool + "\x00" + r.Status + "\x00" + r.Selector + "\x00" + r.Cursor + "\x00" + strconv.Itoa(r.Limit)
}

// get answers from the cache, or returns the ticket for a fetch. mark is
// the caller's own last write (0: none).
func (c *readCache) get(key, org string, page bool, mark uint64) (rawJSON, bool, readTicket) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t := readTicket{key: key, org: org, page: page, epoch: c.epoch, notified: c.notified, minVersion: max(c.notified, mark)}
	if page {
		t.gen = c.pageGen[org]
	} else {
		t.gen = c.orgGen[org]
	}
	if mark > c.notified || len(c.senders) == 0 {
		// past the notices, or none heard yet (no registry replica that
		// sends them: nothing is kept)
		return rawJSON{}, false, t
	}
	e := c.entries[key]
	if e == nil || c.now().Sub(e.stored) > c.maxAge {
		return rawJSON{}, false, t
	}
	return e.answer, true, t
}

// put keeps a fetched answer unless a notice for its organization came
// while it was fetched.
func (c *readCache) put(t readTicket, a rawJSON) {
	size := len(t.key) + len(a.body) + 64
	if size > c.maxBytes/16 {
		return // one answer may not crowd out the rest
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := c.orgGen[t.org]
	if t.page {
		gen = c.pageGen[t.org]
	}
	if gen != t.gen || c.epoch != t.epoch || len(c.senders) == 0 {
		return
	}
	if old := c.entries[t.key]; old != nil {
		c.bytes -= old.size
	}
	c.serial++
	c.entries[t.key] = &readEntry{answer: a, stored: c.now(), size: size, serial: c.serial, org: t.org, page: t.page}
	c.order = append(c.order, orderedKey{t.key, c.serial})
	c.bytes += size
	if t.page {
		keys := c.pages[t.org]
		if keys == nil {
			keys = map[string]struct{}{}
			c.pages[t.org] = keys
		}
		keys[t.key] = struct{}{}
	}
	c.evict()
	readCacheBytes.Set(float64(c.bytes))
}

// evict drops the oldest answers until the cache fits; the order may name
// answers since replaced or dropped, which are skipped.
func (c *readCache) evict() {
	i := 0
	for ; c.bytes > c.maxBytes && i < len(c.order); i++ {
		o := c.order[i]
		if e := c.entries[o.key]; e != nil && e.serial == o.serial {
			c.drop(o.key)
		}
	}
	if i > 0 {
		clear(c.order[:i])
		c.order = c.order[i:]
	}
	if len(c.order) > 4*len(c.entries)+1024 {
		// compact, now and then: keep the entries still current, in order
		kept := make([]orderedKey, 0, 2*len(c.entries)+16)
		for _, o := range c.order {
			if e := c.entries[o.key]; e != nil && e.serial == o.serial {
				kept = append(kept, o)
			}
		}
		c.order = kept
	}
}

func (c *readCache) drop(key string) {
	if e := c.entries[key]; e != nil {
		c.bytes -= e.size
		delete(c.entries, key)
		if e.page {
			if keys := c.pages[e.org]; keys != nil {
				delete(keys, key)
				if len(keys) == 0 {
					delete(c.pages, e.org)
				}
			}
		}
	}
}

// notice applies one of the registry's change notices.
func (c *readCache) notice(data []byte) {
	var n regapi.MachinesChanged
	if err := json.Unmarshal(data, &n); err != nil || n.Version != regapi.MachinesChangedVersion {
		c.mu.Lock()
		c.forget("version")
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	last, known := c.senders[n.Instance]
	switch {
	case n.Reset:
		c.forget("reset")
	case known && n.Counter != last+1, !known && n.Counter != 1:
		// a notice lost, or a sender heard from the middle of its count
		c.forget("gap")
	}
	if !known && len(c.senders) >= maxReadCacheSenders {
		c.forget("senders")
		clear(c.senders)
	}
	c.senders[n.Instance] = n.Counter
	for _, o := range n.Orgs {
		for _, uuid := range o.Changed {
			c.drop(machineKey(o.Org, uuid))
		}
		for _, uuid := range o.Seen {
			c.drop(machineKey(o.Org, uuid))
		}
		c.orgGen[o.Org]++
		if len(o.Changed) > 0 {
			c.pageGen[o.Org]++
			for key := range c.pages[o.Org] {
				c.drop(key) // also takes the key, and at the last the organization, out of c.pages
			}
		}
	}
	c.notified = max(c.notified, n.Position)
	readCacheBytes.Set(float64(c.bytes))
}

// forget drops every answer (reason "" at the start); the caller holds
// the write lock.
func (c *readCache) forget(reason string) {
	if reason != "" {
		readCacheForgets.WithLabelValues(reason).Inc()
		c.log.Debug("read cache forgot every answer", "reason", reason, "answers", len(c.entries))
	}
	c.entries, c.pages, c.order, c.bytes = map[string]*readEntry{}, map[string]map[string]struct{}{}, nil, 0
	if c.orgGen == nil {
		c.orgGen, c.pageGen, c.senders = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
	}
	c.epoch++
	readCacheBytes.Set(0)
}
