package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// IPXEBootBucket holds each machine's latest iPXE boot: a value per
// machine that is overwritten, so that the retries of a machine waiting in
// its iPXE loop do not grow the event log (see machine.IPXEBootDue).
const IPXEBootBucket = "anvil_ipxe_boots"

// IPXEBoots stores the latest iPXE boot of each machine in a JetStream KV
// bucket.
type IPXEBoots struct {
	kv jetstream.KeyValue
	w  *latestWriter
}

type ipxeBoot struct {
	At      time.Time `json:"at"`
	RetryBy time.Time `json:"retry_by,omitzero"`
}

// NewIPXEBoots ensures the bucket.
func NewIPXEBoots(ctx context.Context, js jetstream.JetStream, replicas int) (*IPXEBoots, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      IPXEBootBucket,
		Description: "latest iPXE boot per machine (<org>.<uuid>), recorded in the log at most once per interval",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("iPXE boot bucket: %w", err)
	}
	w, err := newLatestWriter(js, IPXEBootBucket)
	if err != nil {
		return nil, fmt.Errorf("iPXE boot bucket: %w", err)
	}
	return &IPXEBoots{kv: kv, w: w}, nil
}

// Record makes a boot at `at`, whose firmware was told to ask again by
// retryBy (zero: not told to wait), the machine's latest, to be written by
// Run; it fails only when too many machines' boots wait to be written.
func (b *IPXEBoots) Record(_ context.Context, org, uuid string, at, retryBy time.Time) error {
	v, err := json.Marshal(ipxeBoot{At: at.UTC(), RetryBy: retryBy})
	if err != nil {
		return err
	}
	return b.w.Set(key(org, uuid), v)
}

// Run writes the recorded boots until ctx ends.
func (b *IPXEBoots) Run(ctx context.Context, log *slog.Logger) error { return b.w.Run(ctx, log) }

// Watch calls fn for every stored boot and then every new one, until ctx
// ends, so that every replica's read model shows each machine's latest.
func (b *IPXEBoots) Watch(ctx context.Context, log *slog.Logger, fn func(org, uuid string, at, retryBy time.Time)) error {
	return watchMachines(ctx, b.kv, "iPXE boot", log, func(org, uuid string, v []byte) bool {
		var e ipxeBoot
		if json.Unmarshal(v, &e) != nil || e.At.IsZero() {
			return false
		}
		fn(org, uuid, e.At, e.RetryBy)
		return true
	})
}
