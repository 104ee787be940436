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
// TTL/3 with a compare-and-set on the revision it wrote last. A renewal
// that finds the entry written by someone else, or that has not landed
// for most of the TTL, means the lease is lost (it expired and someone
// else may hold it), and the holder stops driving the rollout at once. A
// renewal that only failed (a timeout on a loaded server) is tried again
// at the next tick while the last one that landed still holds: losing
// the lease stops the driver, which costs a rollout seconds.
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
	// heldUntil is when the entry may expire, counted from when the last
	// write that landed was sent, less a margin for the clocks' drift.
	heldUntil := time.Now().Add(l.ttl - l.ttl/6)
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
				sent := time.Now()
				r, err := l.renew(ctx, key, rev, time.Until(heldUntil))
				switch {
				case err == nil:
					rev, heldUntil = r, sent.Add(l.ttl-l.ttl/6)
				case errors.Is(err, errLeaseTaken) || !time.Now().Before(heldUntil):
					l.log.Warn("rollout lease lost", "key", key, "err", err)
					close(lost)
					<-stop
					return
				default:
					// Late, not lost: the entry lasts TTL after the last
					// write that landed, so the next tick tries again.
					l.log.Warn("rollout lease renewal failed; trying again while it holds", "key", key, "err", err,
						"holds_for", time.Until(heldUntil).Round(time.Millisecond))
				}
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

// errLeaseTaken: the entry is not the one this holder wrote last.
var errLeaseTaken = errors.New("the lease entry was written by another holder")

// renew writes the lease entry again over revision rev, within timeout
// (at most TTL/3). An earlier renewal whose answer was lost may have
// landed: an entry this instance wrote at a later revision is its own.
func (l *Leases) renew(ctx context.Context, key string, rev uint64, timeout time.Duration) (uint64, error) {
	if timeout <= 0 {
		return 0, errors.New("the lease expired before it could be renewed")
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(timeout, l.ttl/3))
	defer cancel()
	r, err := l.kv.Update(rctx, key, []byte(l.instance), rev)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, err
	}
	e, gerr := l.kv.Get(rctx, key)
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return 0, errLeaseTaken // expired
	case gerr != nil:
		return 0, gerr
	case string(e.Value()) != l.instance || e.Revision() < rev:
		return 0, errLeaseTaken
	}
	// Ours, at a later revision: renew over it.
	return l.kv.Update(rctx, key, []byte(l.instance), e.Revision())
}
