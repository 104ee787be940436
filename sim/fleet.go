package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// Fleet is a set of simulated machines sharing one configuration and one
// HTTP transport.
type Fleet struct {
	cfg    Config
	dir    string
	ownDir bool

	rebootCount atomic.Int64

	mu       sync.Mutex
	machines []*Machine
	byUUID   map[string]*Machine
	ctx      context.Context
	cancel   context.CancelFunc
	started  bool
	stopped  bool
	wg       sync.WaitGroup
}

// New checks cfg and returns a fleet without machines.
func New(cfg Config) (*Fleet, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	f := &Fleet{cfg: cfg, byUUID: map[string]*Machine{}, dir: cfg.StateDir}
	if f.dir == "" {
		if f.dir, err = os.MkdirTemp("", "anvil-sim-"); err != nil {
			return nil, fmt.Errorf("sim state dir: %w", err)
		}
		f.ownDir = true
	} else if err := os.MkdirAll(f.dir, 0o750); err != nil {
		return nil, fmt.Errorf("sim state dir: %w", err)
	}
	return f, nil
}

var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Add adds a machine with this SMBIOS UUID (canonical form, any case) and
// MAC (aa:bb:cc:dd:ee:ff or with hyphens). A machine added after Start boots
// at once. Adding a UUID twice returns the machine already there. It panics
// on a malformed UUID or MAC: that is a bug in the caller, not a
// simulated fault.
func (f *Fleet) Add(uuid, mac string) *Machine {
	uuid = strings.ToLower(strings.TrimSpace(uuid))
	if !canonicalUUID.MatchString(uuid) {
		panic(fmt.Sprintf("sim: UUID %q is not canonical", uuid))
	}
	hw, err := net.ParseMAC(strings.ReplaceAll(mac, "-", ":"))
	if err != nil || len(hw) != 6 {
		panic(fmt.Sprintf("sim: MAC %q is not an Ethernet address", mac))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.byUUID[uuid]; ok {
		return m
	}
	m := newMachine(f, uuid, hw.String())
	f.machines = append(f.machines, m)
	f.byUUID[uuid] = m
	if f.started && !f.stopped {
		f.startLocked(m)
	}
	return m
}

// AddN adds n machines whose UUIDs and MACs derive from prefix, numbered 1
// to n: calling it again with the same prefix and a larger n returns the
// same first machines and adds the rest. A prefix of at most 20 hex digits
// (hyphens ignored) starts the UUID as written, padded with zeros, and the
// number fills the last 12 digits, so AddN(2, "5a5a0000") gives
// 5a5a0000-0000-0000-0000-000000000001 and …-000000000002. Any other prefix
// is hashed into those 20 digits. MACs are 02:xx:nn:nn:nn:nn (locally
// administered) with xx from the prefix and nn the number.
func (f *Fleet) AddN(n int, prefix string) []*Machine {
	head := strings.ToLower(strings.ReplaceAll(prefix, "-", ""))
	if len(head) > 20 || strings.Trim(head, "0123456789abcdef") != "" {
		sum := sha256.Sum256([]byte(prefix))
		head = hex.EncodeToString(sum[:])[:20]
	}
	head += strings.Repeat("0", 20-len(head))
	sum := sha256.Sum256([]byte(prefix))
	out := make([]*Machine, 0, n)
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("%s%012x", head, i)
		uuid := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[0], byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
		out = append(out, f.Add(uuid, mac))
	}
	return out
}

// Start boots every machine, each in its own goroutine, and those added
// later at once. The machines run until ctx ends or Stop.
func (f *Fleet) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.stopped:
		return errors.New("sim: the fleet was stopped")
	case f.started:
		return errors.New("sim: the fleet was started already")
	}
	f.started = true
	f.ctx, f.cancel = context.WithCancel(ctx)
	for _, m := range f.machines {
		f.startLocked(m)
	}
	return nil
}

func (f *Fleet) startLocked(m *Machine) {
	f.wg.Go(func() { m.run(f.ctx) })
}

// Stop stops every machine and agent and waits for them. Nodes are left as
// they are. The state directory is removed if New created it.
func (f *Fleet) Stop() {
	f.mu.Lock()
	f.stopped = true
	cancel := f.cancel
	f.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	f.wg.Wait()
	if f.ownDir {
		_ = os.RemoveAll(f.dir)
	}
}

// Machines lists the machines in the order they were added.
func (f *Fleet) Machines() []*Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Machine(nil), f.machines...)
}

// Machine returns the machine with this UUID, or nil.
func (f *Fleet) Machine(uuid string) *Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byUUID[strings.ToLower(uuid)]
}

// Counts returns how many machines are in each phase.
func (f *Fleet) Counts() map[Phase]int {
	c := map[Phase]int{}
	for _, m := range f.Machines() {
		c[m.Phase()]++
	}
	return c
}

// TotalReboots is the number of reboots carried out by the whole fleet.
func (f *Fleet) TotalReboots() int64 { return f.rebootCount.Load() }
