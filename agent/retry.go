package agent

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/anvil-fleet/anvil/agent/client"
)

// backoff is exponential with "equal jitter" (half fixed, half random), so a
// rack that lost the boot service together does not come back in lockstep.
type backoff struct {
	initial, max time.Duration
	n            int
}

func (b *backoff) next() time.Duration {
	d := b.max
	if b.n < 30 {
		if e := b.initial << b.n; e > 0 && e < b.max {
			d = e
		}
	}
	b.n++
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.n = 0 }

// maxRetryAfter caps an honoured Retry-After: a longer one is most likely a
// server misconfiguration, and obeying it would make the fleet look offline.
const maxRetryAfter = 10 * time.Minute

// retryDelay is the wait before retrying after err: the backoff, or the
// server's Retry-After when that is longer (plus up to 10% so clients told
// the same time do not all return at once).
func retryDelay(err error, b *backoff) time.Duration {
	d := b.next()
	if ra := min(client.RetryAfter(err), maxRetryAfter); ra > d {
		return ra + rand.N(ra/10+1)
	}
	return d
}

// jitter spreads d by ±frac.
func jitter(d time.Duration, frac float64) time.Duration {
	return time.Duration(float64(d) * (1 + frac*(2*rand.Float64()-1)))
}

// sleep waits for d or until ctx ends; it reports whether the wait completed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
