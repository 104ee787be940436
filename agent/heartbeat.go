package agent

import (
	"context"

	"github.com/anvil-fleet/anvil/agent/api"
)

// cadenceJitter spreads heartbeats and report checks so that a rack powered
// on at once does not hit the boot service in lockstep for the rest of its life.
const cadenceJitter = 0.2

func (a *Agent) heartbeatLoop(ctx context.Context) {
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
