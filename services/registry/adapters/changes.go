package adapters

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// MachineChanges tells readers that keep the registry's answers (the
// gateway's read cache) which machines changed, as api.MachinesChanged
// notices on core NATS: the changes of ChangeNoticeInterval go out as one
// notice, in the order the read model made them, each numbered, so a
// reader that misses one (at most once delivery) notices the gap. With
// nothing to say it still sends an empty notice every IdleNoticeInterval,
// so a reader learns of a loss within about that.
type MachineChanges struct {
	nc         *nats.Conn
	instance   string
	checkpoint func() uint64
	log        *slog.Logger
	wake       chan struct{}

	mu      sync.Mutex
	orgs    map[string]*orgChanges
	named   int
	reset   bool
	counter uint64
	// seq is the highest event sequence noted, also while a reset is
	// pending: a notice's Position is never below a change it covers.
	seq uint64
}

type orgChanges struct {
	changed, seen map[string]struct{}
}

const (
	// ChangeNoticeInterval is how long changes gather before a notice
	// goes out: the longest a reader may serve an answer the read model
	// has already changed, past the time NATS takes to deliver.
	ChangeNoticeInterval = 10 * time.Millisecond
	// IdleNoticeInterval: an empty notice after this long without one.
	IdleNoticeInterval = time.Second
	// maxNamedChanges bounds the machines one notice names; past it (a
	// replay after a start, a burst of heartbeats) the notice says Reset.
	maxNamedChanges = 4096
)

// NewMachineChanges returns a publisher for the replica instance;
// checkpoint is the read model's (the notices' Position).
func NewMachineChanges(nc *nats.Conn, instance string, checkpoint func() uint64, log *slog.Logger) *MachineChanges {
	return &MachineChanges{nc: nc, instance: instance, checkpoint: checkpoint, log: log,
		wake: make(chan struct{}, 1), orgs: map[string]*orgChanges{}}
}

// Note records a change for the next notice. The read model calls it
// under its write lock: it only takes a mutex.
func (c *MachineChanges) Note(ch readmodel.Change) {
	c.mu.Lock()
	c.seq = max(c.seq, ch.Seq)
	if !c.reset {
		o := c.orgs[ch.Org]
		if o == nil {
			o = &orgChanges{changed: map[string]struct{}{}, seen: map[string]struct{}{}}
			c.orgs[ch.Org] = o
		}
		set := o.changed
		if ch.SeenOnly {
			set = o.seen
		}
		if _, dup := set[ch.UUID]; !dup {
			set[ch.UUID] = struct{}{}
			c.named++
		}
		if c.named > maxNamedChanges {
			c.replaced()
		}
	}
	c.mu.Unlock()
	c.poke()
}

// Replaced records that the read model was replaced: the next notice says
// Reset.
func (c *MachineChanges) Replaced() {
	c.mu.Lock()
	c.replaced()
	c.mu.Unlock()
	c.poke()
}

func (c *MachineChanges) replaced() {
	c.reset, c.named = true, 0
	clear(c.orgs)
}

func (c *MachineChanges) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run sends the notices until ctx ends.
func (c *MachineChanges) Run(ctx context.Context) error {
	idle := time.NewTimer(IdleNoticeInterval)
	defer idle.Stop()
	gather := time.NewTimer(0)
	<-gather.C
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-idle.C:
		case <-c.wake:
			gather.Reset(ChangeNoticeInterval)
			select {
			case <-ctx.Done():
				return nil
			case <-gather.C:
			}
		}
		c.send()
		idle.Reset(IdleNoticeInterval)
	}
}

// send publishes what was noted since the last notice. The checkpoint is
// read before the changes are taken, so every change of an event at or
// below it is in this notice or an earlier one; and the position is raised
// to the highest event noted, so no change this notice names (or a reset
// covers) lies above it.
func (c *MachineChanges) send() {
	position := c.checkpoint()
	c.mu.Lock()
	c.counter++
	n := api.MachinesChanged{Version: api.MachinesChangedVersion, Instance: c.instance, Counter: c.counter,
		Position: max(position, c.seq), Reset: c.reset}
	for org, o := range c.orgs {
		n.Orgs = append(n.Orgs, api.OrgMachinesChanged{Org: org, Changed: slices.Collect(maps.Keys(o.changed)), Seen: keysBut(o.seen, o.changed)})
	}
	clear(c.orgs)
	c.reset, c.named = false, 0
	c.mu.Unlock()
	b, err := json.Marshal(n)
	if err == nil {
		err = c.nc.Publish(api.SubjectMachinesChanged, b)
	}
	if err != nil {
		// the reader sees the gap in the count and forgets everything
		c.log.Warn("publishing a change notice", "counter", n.Counter, "err", err)
	}
}

// keysBut is m's keys that are not in but: a machine that changed need
// not also be named as seen.
func keysBut(m, but map[string]struct{}) []string {
	var out []string
	for k := range m {
		if _, ok := but[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}
