package agent

import (
	"context"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

// cadenceJitter spreads heartbeats and report checks so that a rack powered
// on at once does not hit the boot service in lockstep for the rest of its life.
const cadenceJitter = 0.2

// heartbeatLoop sends heartbeats until ctx ends, the first once
// firstReport is closed (the first report was answered, or failed), or
// after a request timeout at most: a report that hangs, or a journal slow
// to read, does not keep the machine offline.
func (a *Agent) heartbeatLoop(ctx context.Context, firstReport <-chan struct{}) {
	wait := time.NewTimer(a.cfg.RequestTimeout)
	defer wait.Stop()
	select {
	case <-firstReport:
	case <-wait.C:
		a.log.Info("first report not answered within the request timeout; heartbeats start without it", "timeout", a.cfg.RequestTimeout.String())
	case <-ctx.Done():
		return
	}
	bo := a.newBackoff()
	failures := 0
	for {
		rctx, cancel := a.requestContext(ctx, 0)
		err := a.client.Heartbeat(rctx, api.Heartbeat{BootedRevision: a.cfg.BootedRevision})
		cancel()
		if ctx.Err() != nil {
			return
		}

		delay := jitter(a.cfg.HeartbeatInterval, cadenceJitter)
		if err != nil {
			failures++
			// Never faster than the normal cadence: retrying sooner would
			// turn an outage into a storm when it ends.
			delay = max(delay, retryDelay(err, bo))
			a.logCallFailure(a.log, "heartbeat", err, failures, delay)
		} else {
			if failures > 0 {
				a.log.Info("heartbeat delivered again", "failed_attempts", failures)
			} else {
				a.log.Debug("heartbeat sent")
			}
			failures = 0
			bo.reset()
		}
		if !sleep(ctx, delay) {
			return
		}
	}
}
