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
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// Hooks are called on changes seen on the bus. They must not block.
type Hooks struct {
	Machine func(org, uuid string)        // a machine's events or boot record changed
	Rollout func(org, id, eventID string) // an event was appended to a rollout
	// BootRecord takes a boot record's new value (nil when deleted) before
	// Machine is called for it; BootRecordsLost is called when the watch
	// starts and ends, as changes in between are not seen. Both optional.
	BootRecord      func(org, uuid string, revision uint64, value []byte)
	BootRecordsLost func()
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
	kv, err := js.KeyValue(ctx, bootapi.RecordsBucket)
	if err != nil {
		return err
	}
	opts := []jetstream.WatchOpt{jetstream.UpdatesOnly()}
	if h.BootRecord == nil {
		opts = append(opts, jetstream.MetaOnly()) // the keys are enough
	}
	w, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		return err
	}
	lost := func() {
		if h.BootRecordsLost != nil {
			h.BootRecordsLost()
		}
	}
	lost()
	defer lost()
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
				if h.BootRecord != nil {
					var value []byte
					if e.Operation() == jetstream.KeyValuePut {
						value = e.Value()
					}
					h.BootRecord(org, uuid, e.Revision(), value)
				}
				h.Machine(org, uuid)
			}
		}
	}
}
