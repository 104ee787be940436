package adapters

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sync/singleflight"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/app"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
)

// Revisions calls the revisions service over NATS.
type Revisions struct {
	NC *nats.Conn

	mu      sync.Mutex
	flatcar map[string]app.Flatcar // revisions are immutable, so is this
}

// maxFlatcarEntries bounds the Flatcar lookup cache (it is emptied when
// full; an entry costs one NATS call to refill).
const maxFlatcarEntries = 16384

// NewRevisions returns a revisions client on nc.
func NewRevisions(nc *nats.Conn) *Revisions {
	return &Revisions{NC: nc, flatcar: map[string]app.Flatcar{}}
}

// Flatcar returns a pool revision's Flatcar channel and version, from
// memory after the first call: a revision never changes.
func (r *Revisions) Flatcar(ctx context.Context, org, pool string, rev uint64) (app.Flatcar, error) {
	if rev == 0 || rev > math.MaxInt32 {
		return app.Flatcar{}, errs.Invalid("revision", "must be a pool revision number")
	}
	key := org + "/" + pool + "/" + fmt.Sprint(rev)
	r.mu.Lock()
	fc, ok := r.flatcar[key]
	r.mu.Unlock()
	if ok {
		return fc, nil
	}
	got, err := revapi.GetRevision(ctx, r.NC, revapi.GetRevisionRequest{Org: org, Pool: pool, Revision: int(rev)})
	if err != nil {
		return app.Flatcar{}, err
	}
	fc = app.Flatcar{Channel: got.Config.Flatcar.Channel, Version: got.Config.Flatcar.Version}
	r.mu.Lock()
	if len(r.flatcar) >= maxFlatcarEntries {
		clear(r.flatcar)
	}
	r.flatcar[key] = fc
	r.mu.Unlock()
	return fc, nil
}

// Render asks the revisions service for a machine revision's Ignition.
func (r *Revisions) Render(ctx context.Context, q app.IgnitionRequest) (app.Rendered, error) {
	if q.Revision == 0 || q.Revision > math.MaxInt32 {
		return app.Rendered{}, errs.Invalid("revision", "must be a pool revision number")
	}
	got, err := revapi.RenderMachine(ctx, r.NC, revapi.RenderMachineRequest{
		Org: q.Org, Pool: q.Pool, Revision: int(q.Revision), Hostname: q.Hostname, Labels: q.Labels,
	})
	if err != nil {
		return app.Rendered{}, err
	}
	return app.Rendered{MachineRevisionID: got.MachineRevisionID, Ignition: got.Ignition}, nil
}

var (
	cacheLookups = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_cache_lookups_total",
		Help: "Ignition cache lookups by result: hit, miss (a miss that waited for another request's render counts as shared).",
	}, []string{"result"})
	cacheRenders = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_cache_renders_total",
		Help: "Machine revisions rendered by the revisions service for the cache.",
	})
	cacheEvictions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ignition_cache_evictions_total",
		Help: "Ignition cache entries dropped, by why: size, expired, invalidated (a cluster of the organization changed).",
	}, []string{"why"})
	cacheBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_boot_ignition_cache_bytes",
		Help: "Bytes of rendered Ignition held in the cache (summed over the process's caches).",
	})
)

// IgnitionCache keeps rendered Ignition configs (with the credential
// placeholder, never a credential) per machine revision: the organization,
// pool, pool revision, hostname and labels. Pool revisions are immutable,
// but the join material that the render embeds is the cluster's and can be
// rotated, so entries expire after a TTL and every entry of an
// organization is dropped when one of its clusters changes (Watch). It is
// bounded by bytes, least recently used first, and concurrent misses for
// one key share a single render: a rack powering on costs one render per
// distinct machine revision, and the rest are memory reads.
type IgnitionCache struct {
	render   func(context.Context, app.IgnitionRequest) (app.Rendered, error)
	maxBytes int64
	ttl      time.Duration
	now      func() time.Time
	group    singleflight.Group

	mu    sync.Mutex
	size  int64
	order *list.List // front: most recently used
	items map[string]*list.Element
	gen   map[string]uint64 // per organization, bumped on invalidation
	epoch uint64            // bumped by InvalidateAll
}

type cacheEntry struct {
	key, org string
	val      app.Rendered
	at       time.Time
	size     int64
}

// NewIgnitionCache caches render (Revisions.Render, in production).
func NewIgnitionCache(render func(context.Context, app.IgnitionRequest) (app.Rendered, error), maxBytes int64, ttl time.Duration) *IgnitionCache {
	return &IgnitionCache{render: render, maxBytes: maxBytes, ttl: ttl, now: time.Now,
		order: list.New(), items: map[string]*list.Element{}, gen: map[string]uint64{}}
}

// renderTimeout bounds one shared render: it runs detached from the
// first caller's context, so that its cancellation does not fail the
// others waiting on it.
const renderTimeout = 30 * time.Second

// Ignition returns the machine revision's config, rendering it at most
// once per key while it is cached.
func (c *IgnitionCache) Ignition(ctx context.Context, q app.IgnitionRequest) (app.Rendered, error) {
	key := cacheKey(q)
	if r, ok := c.get(key); ok {
		cacheLookups.WithLabelValues("hit").Inc()
		return r, nil
	}
	v, err, shared := c.group.Do(key, func() (any, error) {
		if r, ok := c.get(key); ok {
			return r, nil
		}
		gen := c.generation(q.Org)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renderTimeout)
		defer cancel()
		r, err := c.render(rctx, q)
		if err != nil {
			return nil, err
		}
		cacheRenders.Inc()
		c.put(key, q.Org, gen, r)
		return r, nil
	})
	if shared {
		cacheLookups.WithLabelValues("shared").Inc()
	} else {
		cacheLookups.WithLabelValues("miss").Inc()
	}
	if err != nil {
		return app.Rendered{}, err
	}
	return v.(app.Rendered), nil
}

func (c *IgnitionCache) get(key string) (app.Rendered, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return app.Rendered{}, false
	}
	e := el.Value.(*cacheEntry)
	if c.ttl > 0 && c.now().Sub(e.at) >= c.ttl {
		c.remove(el)
		cacheEvictions.WithLabelValues("expired").Inc()
		return app.Rendered{}, false
	}
	c.order.MoveToFront(el)
	return e.val, true
}

// generation grows whenever the organization's entries or all entries are
// invalidated (both counters only grow, so their sum changes with either).
func (c *IgnitionCache) generation(org string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen[org] + c.epoch
}

func (c *IgnitionCache) put(key, org string, gen uint64, r app.Rendered) {
	size := int64(len(r.Ignition) + len(key) + len(r.MachineRevisionID) + 128)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen[org]+c.epoch != gen || size > c.maxBytes {
		return // invalidated while rendering, or too big to keep
	}
	if el, ok := c.items[key]; ok {
		c.remove(el)
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, org: org, val: r, at: c.now(), size: size})
	c.size += size
	cacheBytes.Add(float64(size))
	for c.size > c.maxBytes {
		c.remove(c.order.Back())
		cacheEvictions.WithLabelValues("size").Inc()
	}
}

func (c *IgnitionCache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.order.Remove(el)
	delete(c.items, e.key)
	c.size -= e.size
	cacheBytes.Sub(float64(e.size))
}

// InvalidateOrg drops every entry of an organization, and makes renders
// that are under way for it not be cached.
func (c *IgnitionCache) InvalidateOrg(org string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen[org]++
	for el := c.order.Front(); el != nil; {
		next := el.Next()
		if el.Value.(*cacheEntry).org == org {
			c.remove(el)
			cacheEvictions.WithLabelValues("invalidated").Inc()
		}
		el = next
	}
}

// InvalidateAll drops every entry, and makes renders under way not be
// cached: an asset they name changed.
func (c *IgnitionCache) InvalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for el := c.order.Front(); el != nil; {
		next := el.Next()
		c.remove(el)
		cacheEvictions.WithLabelValues("invalidated").Inc()
		el = next
	}
}

// Len is the number of entries (for tests).
func (c *IgnitionCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Close releases the cache's share of the bytes gauge.
func (c *IgnitionCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	cacheBytes.Sub(float64(c.size))
	c.size = 0
	c.items = map[string]*list.Element{}
	c.order.Init()
}

// cacheKey is length-prefixed, so that no two requests share a key.
func cacheKey(q app.IgnitionRequest) string {
	var b strings.Builder
	add := func(s string) { fmt.Fprintf(&b, "%d:%s;", len(s), s) }
	add(q.Org)
	add(q.Pool)
	add(fmt.Sprint(q.Revision))
	add(q.Hostname)
	keys := make([]string, 0, len(q.Labels))
	for k := range q.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		add(k)
		add(q.Labels[k])
	}
	return b.String()
}

// WatchClusters drops an organization's cached configs whenever one of its
// clusters changes (the join material may have been rotated), by following
// the log's cluster events from now on, until ctx ends.
func (c *IgnitionCache) WatchClusters(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	follow(ctx, js, "cluster", log, "cached Ignition expires by TTL only until this works", func(m jetstream.Msg, ref events.AggregateRef) {
		c.InvalidateOrg(ref.Org)
		log.Debug("cached Ignition of the organization dropped: a cluster changed", "org", ref.Org, "cluster", ref.ID)
	})
}

// FollowMachineEvents calls fn with the organization, UUID and stream
// sequence of every machine event of one of the given types appended from
// now on, until ctx ends. Each replica follows on its own (an ordered
// consumer), since each has its own cache.
func FollowMachineEvents(ctx context.Context, js jetstream.JetStream, types []string, fn func(org, uuid string, seq uint64), log *slog.Logger) {
	want := map[string]bool{}
	for _, t := range types {
		want[t] = true
	}
	follow(ctx, js, "machine", log, "Ignition is rendered when machines ask until this works", func(m jetstream.Msg, ref events.AggregateRef) {
		if !want[m.Headers().Get(events.HeaderEventType)] {
			return
		}
		if meta, err := m.Metadata(); err == nil {
			fn(ref.Org, ref.ID, meta.Sequence.Stream)
		}
	})
}

// follow calls fn for every event of an aggregate type appended from now
// on, reading only headers (the type is in Anvil-Event-Type), and
// re-subscribes after any failure until ctx ends. degraded says what runs
// without it, for the log.
func follow(ctx context.Context, js jetstream.JetStream, aggregateType string, log *slog.Logger, degraded string, fn func(jetstream.Msg, events.AggregateRef)) {
	followFrom(ctx, js, aggregateType, log, degraded, nil, fn)
}

// followFrom is follow, calling subscribed (if not nil) each time it has
// (re)subscribed: events appended between two subscriptions are not seen.
func followFrom(ctx context.Context, js jetstream.JetStream, aggregateType string, log *slog.Logger, degraded string, subscribed func(), fn func(jetstream.Msg, events.AggregateRef)) {
	for ctx.Err() == nil {
		cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.FilterSubject("", aggregateType, "")},
			DeliverPolicy:  jetstream.DeliverNewPolicy,
			HeadersOnly:    true,
		})
		if err != nil {
			log.Warn("cannot follow "+aggregateType+" events; "+degraded, "err", err)
			_ = clock.Sleep(ctx, 5*time.Second)
			continue
		}
		it, err := cons.Messages()
		if err != nil {
			_ = clock.Sleep(ctx, 5*time.Second)
			continue
		}
		if subscribed != nil {
			subscribed()
		}
		stop := context.AfterFunc(ctx, it.Stop)
		for {
			m, err := it.Next()
			if err != nil {
				break
			}
			if ref, err := events.ParseSubject(m.Subject()); err == nil {
				fn(m, ref)
			}
		}
		stop()
		it.Stop()
	}
}
