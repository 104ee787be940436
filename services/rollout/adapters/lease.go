package adapters

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucket holds the rollout leases: key <org>.<rollout>, value the
// holder's instance name.
const LeaseBucket = "anvil_rollout_leases"

// Leases are per-rollout leases in a JetStream KV bucket whose entries
// expire TTL after their last write. The holder renews its entry every
// TTL/3 with a compare-and-set on the revision it wrote last; a failed
// renewal means the lease is lost (it expired and someone else may hold
// it), and the holder stops driving the rollout at once.
//
// What a lost lease costs: between the moment a holder stops renewing
// (stuck, partitioned) and the moment it notices, another replica may take
// the lease after TTL and drive the same rollout. Both then plan on the
// same log: every append is optimistic, so only one of two conflicting
// decisions lands, and every action is idempotent (a second cordon, drain
// or uncordon is a no-op; a reboot instruction carries the id recorded in
// the log, which the boot service stores once). The overlap wastes work
// but breaks no invariant.
type Leases struct {
	kv       jetstream.KeyValue
	instance string
	ttl      time.Duration
	log      *slog.Logger
}

// NewLeases opens (or creates) the lease bucket.
func NewLeases(ctx context.Context, js jetstream.JetStream, instance string, ttl time.Duration, replicas int, log *slog.Logger) (*Leases, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: LeaseBucket, Description: "anvil rollout leases: which replica drives which rollout",
		TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	return &Leases{kv: kv, instance: instance, ttl: ttl, log: log}, nil
}

// Acquire implements app.Leases.
func (l *Leases) Acquire(ctx context.Context, key string) (<-chan struct{}, func(), bool, error) {
	rev, err := l.kv.Create(ctx, key, []byte(l.instance))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	lost := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				// Hand over at once rather than after the TTL.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = l.kv.Delete(dctx, key, jetstream.LastRevision(rev))
				cancel()
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl/3)
				r, err := l.kv.Update(rctx, key, []byte(l.instance), rev)
				cancel()
				if err != nil {
					l.log.Warn("rollout lease lost", "key", key, "err", err)
					close(lost)
					<-stop
					return
				}
				rev = r
			}
		}
	}()
	var once bool
	release := func() {
		if once {
			return
		}
		once = true
		close(stop)
		<-done
	}
	return lost, release, true, nil
}
