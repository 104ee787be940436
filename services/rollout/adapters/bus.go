package adapters

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
)

// BootRecordsBucket is the boot service's KV bucket of machine records;
// a change there is a change of a machine's instructions.
const BootRecordsBucket = "anvil_boot_machines"

// Hooks are called on changes seen on the bus. They must not block.
type Hooks struct {
	Machine func(org, uuid string)        // a machine's events or boot record changed
	Rollout func(org, id, eventID string) // an event was appended to a rollout
}

// Follow subscribes to machine and rollout events and watches the boot
// records until ctx ends. Everything it reports is a hint: what waits on
// it also looks on its own every so often.
func Follow(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, h Hooks, log *slog.Logger) error {
	subs := []*nats.Subscription{}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, typ := range []string{"machine", "rollout"} {
		s, err := nc.Subscribe(events.SubjectPrefix+".*."+typ+".*", func(m *nats.Msg) {
			parts := strings.Split(m.Subject, ".")
			if len(parts) != 4 {
				return
			}
			org, id := parts[1], parts[3]
			if parts[2] == "machine" {
				h.Machine(org, id)
				return
			}
			h.Rollout(org, id, m.Header.Get(nats.MsgIdHdr))
		})
		if err != nil {
			return err
		}
		s.SetPendingLimits(1<<20, 256<<20)
		subs = append(subs, s)
	}
	for ctx.Err() == nil {
		err := watchBootRecords(ctx, js, h)
		if ctx.Err() != nil {
			break
		}
		if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			log.Warn("watching the boot records failed; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	return nil
}

func watchBootRecords(ctx context.Context, js jetstream.JetStream, h Hooks) error {
	kv, err := js.KeyValue(ctx, BootRecordsBucket)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			if e == nil {
				continue
			}
			if org, uuid, ok := strings.Cut(e.Key(), "."); ok {
				h.Machine(org, uuid)
			}
		}
	}
}
