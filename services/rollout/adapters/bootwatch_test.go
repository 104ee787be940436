package adapters

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// seenKeys records the machines whose change Follow reported.
type seenKeys struct {
	mu   sync.Mutex
	seen map[string]int
}

func (s *seenKeys) machine(org, uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[org+"."+uuid]++
}

func (s *seenKeys) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

func putRecord(t *testing.T, kv jetstream.KeyValue, key string, ins ...bootapi.RecordedInstruction) {
	t.Helper()
	// A boot record holds more than the contract's part; the rest is ignored.
	data, err := json.Marshal(map[string]any{"org": "acme", "booted": "mr-x", "instructions": ins})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// The rollout's questions about an instruction of a followed machine are
// answered from the boot records it watches, against a real JetStream KV
// bucket; it asks the boot service (here: no one serves it, so asking
// fails) only before the watch showed the record, for machines no step
// follows (nor did recently), and after the watch ended.
func TestFollowedBootAnswersFromTheWatchedRecords(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx := context.Background()
	kv, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bootapi.RecordsBucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	boot := NewFollowedBoot(Boot{NC: env.Conn})
	boot.KeepIdle = 1
	keys := &seenKeys{seen: map[string]int{}}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = Follow(watchCtx, env.Conn, env.JS, Hooks{Machine: keys.machine, Rollout: func(string, string, string) {},
			BootRecord: boot.Observe, BootRecordsLost: boot.Forget}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { stopWatch(); <-watching })
	const m1, m2 = "4c4c4544-0000-1000-8000-000000000001", "4c4c4544-0000-1000-8000-000000000002"
	k1, k2 := "acme."+m1, "acme."+m2
	// The watch runs once it reports a change.
	eventstest.Eventually(t, "the watch reports a change", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		putRecord(t, kv, k2)
		return keys.count(k2) > 0, "no change reported"
	})
	asks := func(org, uuid, id string) bool {
		_, err := boot.Instruction(ctx, org, uuid, id)
		return err != nil && errs.KindOf(err) != errs.KindNotFound
	}
	waitSeen := func(key string, n int) {
		eventstest.Eventually(t, "the change of "+key+" reported", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
			return keys.count(key) >= n, "not yet"
		})
	}

	release := boot.Follow("acme", m1)
	if !asks("acme", m1, "i-1") {
		t.Fatal("answered for a followed machine before the watch showed its record")
	}
	accepted := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	putRecord(t, kv, k1, bootapi.RecordedInstruction{ID: "i-1", Kind: bootapi.KindReboot, Status: bootapi.StatusPending})
	waitSeen(k1, 1)
	in, err := boot.Instruction(ctx, "acme", m1, "i-1")
	if err != nil || in.Status != bootapi.StatusPending || in.UUID != m1 || in.Org != "acme" {
		t.Fatalf("instruction from the watch = %+v, %v; want i-1 pending", in, err)
	}
	if _, err := boot.Instruction(ctx, "acme", m1, "i-2"); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("an instruction the record does not hold = %v, want not found", err)
	}
	putRecord(t, kv, k1, bootapi.RecordedInstruction{ID: "i-1", Kind: bootapi.KindReboot, Status: bootapi.StatusAccepted, AcceptedAt: accepted})
	waitSeen(k1, 2)
	if in, err := boot.Instruction(ctx, "acme", m1, "i-1"); err != nil || in.Status != bootapi.StatusAccepted || !in.AcceptedAt.Equal(accepted) {
		t.Fatalf("after the agent's answer = %+v, %v; want accepted at %v", in, err, accepted)
	}
	if !asks("acme", m2, "i-1") {
		t.Fatal("answered for a machine no step follows")
	}

	// A second follower keeps the record at hand after the first lets go.
	release2 := boot.Follow("acme", m1)
	release()
	release() // twice is once
	if asks("acme", m1, "i-1") {
		t.Fatal("asked while a follower remained")
	}
	if err := kv.Delete(ctx, k1); err != nil {
		t.Fatal(err)
	}
	waitSeen(k1, 3)
	if _, err := boot.Instruction(ctx, "acme", m1, "i-1"); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("an instruction of a deleted record = %v, want not found", err)
	}
	release2()
	if _, err := boot.Instruction(ctx, "acme", m1, "i-1"); errs.KindOf(err) != errs.KindNotFound {
		t.Fatalf("a record released last is kept current, but answered %v", err)
	}
	boot.Follow("acme", m2)() // released after m1: only one is kept
	if !asks("acme", m1, "i-1") {
		t.Fatal("answered for a machine no step follows any more, released before KeepIdle others")
	}

	// When the watch ends, what it showed may go stale: ask again.
	release3 := boot.Follow("acme", m1)
	defer release3()
	putRecord(t, kv, k1, bootapi.RecordedInstruction{ID: "i-3", Kind: bootapi.KindReboot, Status: bootapi.StatusPending})
	waitSeen(k1, 4)
	if asks("acme", m1, "i-3") {
		t.Fatal("asked about a record the watch showed")
	}
	stopWatch()
	<-watching
	if !asks("acme", m1, "i-3") {
		t.Fatal("answered from a record no watch keeps current")
	}
}
