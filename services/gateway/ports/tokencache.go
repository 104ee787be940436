package ports

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
)

// tokenCache remembers verified API tokens for a short while, so that a
// request costs one round trip to the registry (its query) rather than two
// (the token, then the query). Only successes are kept, under the token's
// SHA-256. Every event of an organization aggregate (where tokens are
// issued and revoked) empties the cache at once and stops caching for
// flushQuiet, so a revocation takes effect as soon as the registry has
// applied it; the TTL bounds how long a missed event, or a token's
// expiry, can go unnoticed.
type tokenCache struct {
	ttl time.Duration
	mu  sync.RWMutex // every request reads; a verification or a flush writes
	m   map[[sha256.Size]byte]cachedPrincipal
	// quietUntil: for a moment after an organization event nothing is
	// cached, since the registry's projection may not have applied the
	// event yet and would still vouch for a token just revoked.
	quietUntil time.Time
	sub        *nats.Subscription
}

// flushQuiet is how long after an organization event verifications are
// not cached.
const flushQuiet = 2 * time.Second

type cachedPrincipal struct {
	p       domain.Principal
	expires time.Time
}

// maxCachedTokens bounds the cache; past it, it starts over.
const maxCachedTokens = 10_000

func newTokenCache(nc *nats.Conn, ttl time.Duration) *tokenCache {
	if ttl <= 0 || nc == nil {
		return nil
	}
	c := &tokenCache{ttl: ttl, m: map[[sha256.Size]byte]cachedPrincipal{}}
	// events.<org>.org.<id>: core NATS sees every append to the stream
	sub, err := nc.Subscribe(events.SubjectPrefix+".*.org.*", func(*nats.Msg) { c.flush() })
	if err != nil {
		return nil // no invalidation, no cache
	}
	c.sub = sub
	return c
}

// get and put take the token's SHA-256, which the caller has computed
// already to compare it with the bootstrap admin's.
func (c *tokenCache) get(k [sha256.Size]byte) (domain.Principal, bool) {
	if c == nil {
		return domain.Principal{}, false
	}
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if !ok || time.Now().After(e.expires) {
		return domain.Principal{}, false
	}
	return e.p, true
}

func (c *tokenCache) put(k [sha256.Size]byte, p domain.Principal) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Now().Before(c.quietUntil) {
		return
	}
	if len(c.m) >= maxCachedTokens {
		clear(c.m)
	}
	c.m[k] = cachedPrincipal{p: p, expires: time.Now().Add(c.ttl)}
}

func (c *tokenCache) flush() {
	c.mu.Lock()
	clear(c.m)
	c.quietUntil = time.Now().Add(flushQuiet)
	c.mu.Unlock()
}
