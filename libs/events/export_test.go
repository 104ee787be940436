package events

import "time"

// SetReplayIdleLimit sets how long a replay may deliver nothing while
// events are still to read, until the returned function restores it.
func SetReplayIdleLimit(d time.Duration) (restore func()) {
	old := replayIdleLimit.Swap(int64(d))
	return func() { replayIdleLimit.Store(old) }
}
