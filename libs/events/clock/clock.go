// Package clock holds the one context-aware wait every service uses
// between retries and polls, so that a stopping service never sits out a
// back-off.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever is first, and returns
// ctx.Err() when ctx ended (nil when the wait completed). A d of zero or
// less does not wait, yet still reports an ended ctx, so that a loop with
// a zero back-off stops when asked.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
