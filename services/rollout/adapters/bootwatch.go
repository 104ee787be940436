package adapters

import (
	"container/list"
	"context"
	"sync"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
)

// FollowedBoot answers what became of a reboot instruction from the boot
// records bucket the rollout watches (bootapi.RecordsBucket), for the
// machines whose steps follow it, and asks the boot service only until
// the watch has shown the machine's record once. Asking on every wake-up
// of every waiting step filled the boot service's command slots with the
// very questions the steps waited on (808,562 calls, 1,410 a second, in a
// 10,000-machine rollout with 1,000 reboots in flight). A record no step
// follows any more is kept current a while (the KeepIdle most recently
// released): the machine's next step (wait_boot after issue_reboot)
// follows it again at once.
type FollowedBoot struct {
	// Ask is the boot service's query, for what the watch has not shown.
	Ask app.Boot
	// KeepIdle is how many records no step follows are kept current.
	KeepIdle int

	mu       sync.Mutex
	followed map[string]*followedRecord // by bootapi key <org>.<uuid>
	idle     *list.List                 // keys no step follows, least recently released first
}

// DefaultKeepIdle is FollowedBoot.KeepIdle unless set.
const DefaultKeepIdle = 4096

type followedRecord struct {
	followers int
	idle      *list.Element // in FollowedBoot.idle while no step follows it
	// seen: the watch delivered the record since it was followed, so
	// instructions is the record as of revision (and later changes
	// will be delivered too, until Forget).
	seen         bool
	revision     uint64
	instructions bootapi.RecordedInstructions
}

// NewFollowedBoot returns a FollowedBoot that asks ask.
func NewFollowedBoot(ask app.Boot) *FollowedBoot {
	return &FollowedBoot{Ask: ask, KeepIdle: DefaultKeepIdle, followed: map[string]*followedRecord{}, idle: list.New()}
}

func recordKey(org, uuid string) string { return org + "." + uuid }

// Follow keeps the machine's boot record at hand until release is called.
func (b *FollowedBoot) Follow(org, uuid string) (release func()) {
	key := recordKey(org, uuid)
	b.mu.Lock()
	f := b.followed[key]
	if f == nil {
		f = &followedRecord{}
		b.followed[key] = f
	}
	if f.idle != nil {
		b.idle.Remove(f.idle)
		f.idle = nil
	}
	f.followers++
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if f.followers--; f.followers > 0 {
				return
			}
			f.idle = b.idle.PushBack(key)
			for b.idle.Len() > max(b.KeepIdle, 0) {
				oldest := b.idle.Remove(b.idle.Front()).(string)
				delete(b.followed, oldest)
			}
		})
	}
}

// Instruction reads one instruction: from the watched record when the
// machine is followed (or was recently) and its record was seen, else
// from the boot service.
func (b *FollowedBoot) Instruction(ctx context.Context, org, uuid, id string) (bootapi.Instruction, error) {
	b.mu.Lock()
	f := b.followed[recordKey(org, uuid)]
	if f == nil || !f.seen {
		b.mu.Unlock()
		return b.Ask.Instruction(ctx, org, uuid, id)
	}
	in, ok := f.instructions.Find(id)
	b.mu.Unlock()
	if !ok {
		return bootapi.Instruction{}, errs.NotFound("instruction %s of machine %s is not known", id, uuid)
	}
	return in.View(org, uuid), nil
}

// Observe takes a record's new value (nil when it was deleted) at a
// revision of the bucket, if its machine is followed or was recently.
func (b *FollowedBoot) Observe(org, uuid string, revision uint64, value []byte) {
	key := recordKey(org, uuid)
	b.mu.Lock()
	_, wanted := b.followed[key]
	b.mu.Unlock()
	if !wanted {
		return
	}
	ins, err := bootapi.DecodeRecordedInstructions(value)
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.followed[key]
	switch {
	case f == nil, f.seen && revision <= f.revision:
		return
	case err != nil:
		// Not the contract's shape: ask the boot service instead.
		f.seen = false
		return
	}
	f.seen, f.revision, f.instructions = true, revision, ins
}

// Forget drops every record seen: the watch ended or started again, and
// changes in between were not seen.
func (b *FollowedBoot) Forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.followed {
		f.seen, f.revision, f.instructions = false, 0, bootapi.RecordedInstructions{}
	}
}
