package adapters

import (
	"context"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/boot/app"
)

// FollowKnownMachines keeps k true to the log until ctx ends: every
// machine event makes it forget the machine, every organization event the
// organization's machines, and every (re)subscription everything, since
// what was appended in between is not seen. Each replica follows on its
// own, as each has its own memory.
func FollowKnownMachines(ctx context.Context, js jetstream.JetStream, k *app.KnownMachines, log *slog.Logger) {
	const degraded = "/ipxe answers from memory for at most --ipxe-known-ttl until this works"
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		followFrom(ctx, js, "org", log, degraded, k.Reset, func(_ jetstream.Msg, ref events.AggregateRef) {
			k.ForgetOrg(ref.Org)
		})
	})
	followFrom(ctx, js, "machine", log, degraded, k.Reset, func(m jetstream.Msg, ref events.AggregateRef) {
		var seq uint64
		if meta, err := m.Metadata(); err == nil {
			seq = meta.Sequence.Stream
		}
		k.Forget(ref.Org, ref.ID, seq)
	})
}
