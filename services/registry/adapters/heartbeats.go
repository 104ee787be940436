// Package adapters connects the registry to JetStream: the KV buckets of
// heartbeats, iPXE boots, enrollment limits and versions.
package adapters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HeartbeatBucket holds each machine's last heartbeat: a value per machine
// that is overwritten, so heartbeats never grow the event log.
const HeartbeatBucket = "anvil_heartbeats"

// Heartbeats stores last-seen times in a JetStream KV bucket, written off
// the request path (Run).
type Heartbeats struct {
	kv jetstream.KeyValue
	w  *latestWriter
}

// NewHeartbeats ensures the bucket.
func NewHeartbeats(ctx context.Context, js jetstream.JetStream, replicas int) (*Heartbeats, error) {
	if replicas == 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      HeartbeatBucket,
		Description: "last agent heartbeat per machine (<org>.<uuid>)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat bucket: %w", err)
	}
	w, err := newLatestWriter(js, HeartbeatBucket)
	if err != nil {
		return nil, fmt.Errorf("heartbeat bucket: %w", err)
	}
	return &Heartbeats{kv: kv, w: w}, nil
}

func key(org, uuid string) string { return org + "." + uuid }

// Record makes t the machine's last heartbeat, to be written by Run; it
// fails only when too many machines' heartbeats wait to be written.
func (h *Heartbeats) Record(_ context.Context, org, uuid string, t time.Time) error {
	return h.w.Set(key(org, uuid), t.UTC().AppendFormat(nil, time.RFC3339Nano))
}

// Run writes the recorded heartbeats until ctx ends.
func (h *Heartbeats) Run(ctx context.Context, log *slog.Logger) error { return h.w.Run(ctx, log) }

// Watch calls fn for every stored heartbeat and then every new one, until
// ctx ends, so every replica's read model knows when each machine was seen.
func (h *Heartbeats) Watch(ctx context.Context, log *slog.Logger, fn func(org, uuid string, t time.Time)) error {
	return watchMachines(ctx, h.kv, "heartbeat", log, func(org, uuid string, v []byte) bool {
		t, err := time.Parse(time.RFC3339Nano, string(v))
		if err != nil {
			return false
		}
		fn(org, uuid, t)
		return true
	})
}

// watchMachines calls fn with every value of a bucket keyed <org>.<uuid>,
// then with every new one, until ctx ends. fn reports whether the value was
// well-formed; what is not is logged and skipped.
func watchMachines(ctx context.Context, kv jetstream.KeyValue, what string, log *slog.Logger, fn func(org, uuid string, v []byte) bool) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New(what + " watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the initial values
			}
			org, uuid, ok := strings.Cut(e.Key(), ".")
			if !ok || !fn(org, uuid, e.Value()) {
				log.Warn("ignoring malformed "+what+" entry", "key", e.Key())
			}
		}
	}
}
