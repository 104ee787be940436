package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-fleet/anvil/agent"
)

// Phase is what a simulated machine is doing.
type Phase string

// The phases, in the order a machine usually goes through them.
const (
	// PhaseOff: not started yet, or stopped.
	PhaseOff Phase = "off"
	// PhaseWaiting: in iPXE, told to wait (no pool or revision yet) or
	// refused, or the boot service did not answer; it keeps asking.
	PhaseWaiting Phase = "waiting"
	// PhaseBooting: powered on and asking the boot service, or given a
	// boot script and fetching its Ignition config.
	PhaseBooting Phase = "booting"
	// PhaseRunning: booted; the agent runs and the Node is up.
	PhaseRunning Phase = "running"
	// PhaseRebooting: the agent asked for a reboot; the Node is NotReady.
	PhaseRebooting Phase = "rebooting"
	// PhaseHung: a reboot that does not come back until Hang(false).
	PhaseHung Phase = "hung"
)

// Phases lists every phase, for progress displays.
var Phases = []Phase{PhaseOff, PhaseWaiting, PhaseBooting, PhaseRunning, PhaseRebooting, PhaseHung}

// Reboot is one reboot a machine's agent carried out.
type Reboot struct {
	// InstructionID is the instruction the agent rebooted for.
	InstructionID string
	// Kind and Revision are the instruction's ("reboot", "mr-…").
	Kind, Revision string
	// From is the machine revision booted when the reboot began.
	From string
	At   time.Time
}

// EventKind says what happened to a machine.
type EventKind string

// Event kinds.
const (
	EventPhase        EventKind = "phase"         // Phase changed
	EventBooted       EventKind = "booted"        // Ignition applied; Revision, Hostname set
	EventAgentStarted EventKind = "agent_started" // the agent of this boot runs
	EventReboot       EventKind = "reboot"        // the agent asked for a reboot; InstructionID set
	EventRebootFailed EventKind = "reboot_failed" // the simulated reboot command failed (RebootErrorRate)
	EventNodeReady    EventKind = "node_ready"    // the Node was handed to kwok (it turns Ready)
	EventNodeNotReady EventKind = "node_not_ready"
	EventError        EventKind = "error" // Message says what failed (Ignition, the agent, Kubernetes)
)

// Event is something that happened to a machine.
type Event struct {
	At            time.Time
	UUID          string
	Kind          EventKind
	Phase         Phase
	Hostname      string
	Revision      string // the booted machine revision
	InstructionID string // EventReboot
	Message       string
}

// Status is a consistent snapshot of a machine.
type Status struct {
	UUID, MAC, Hostname string
	Phase               Phase
	BootedRevision      string
	Boots               int // completed boots (Ignition applied, agent started)
	Reboots             []Reboot
	IPXERequests        int64 // requests to /ipxe, retries included
	Hung, NeverJoin     bool  // the switches
	NodeReady           bool  // the Node was last handed to kwok (not NotReady)
	LastError           string
	Console             []string // the last lines the firmware echoed
}

const consoleLines = 20

// Machine is one simulated machine. Its methods are safe for concurrent use.
type Machine struct {
	fleet *Fleet
	uuid  string
	mac   string // aa:bb:cc:dd:ee:ff
	dir   string // state file and fake root
	log   *slog.Logger

	ipxeRequests atomic.Int64
	kick         chan struct{} // NeverJoin changed
	unhang       chan struct{} // Hang(false)

	mu        sync.Mutex
	rng       *rand.Rand
	phase     Phase
	boot      *BootConfig // the current boot's, nil before the first
	boots     int
	reboots   []Reboot
	hang      bool // the next reboot hangs / the machine is hung
	neverJoin bool
	nodeReady bool
	nodeName  string            // the Node last created or updated
	applied   map[string]string // labels the simulator put on that Node
	lastErr   string
	screen    []string
	journal   []string
	pending   *Reboot // set by the Rebooter, taken by the run loop
	// kwokKept: that Node carries the kwok label (kwok keeps its lease
	// and pods); rebooting: its Ready condition is False with
	// RebootingReason, which kwok leaves to the simulator to undo.
	kwokKept, rebooting bool
}

func newMachine(f *Fleet, uuid, mac string) *Machine {
	h := fnv.New64a()
	h.Write([]byte(uuid))
	return &Machine{
		fleet: f, uuid: uuid, mac: mac,
		dir:    filepath.Join(f.dir, uuid),
		log:    f.cfg.Logger.With("sim_machine", uuid),
		kick:   make(chan struct{}, 1),
		unhang: make(chan struct{}, 1),
		rng:    rand.New(rand.NewPCG(uint64(f.cfg.Seed), h.Sum64())),
		phase:  PhaseOff,
	}
}

// UUID is the machine's SMBIOS UUID (lowercase).
func (m *Machine) UUID() string { return m.uuid }

// MAC is the machine's MAC address (aa:bb:cc:dd:ee:ff).
func (m *Machine) MAC() string { return m.mac }

// Hostname is the hostname of the last boot's Ignition config ("" before).
func (m *Machine) Hostname() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.boot == nil {
		return ""
	}
	return m.boot.Hostname
}

// Phase is what the machine is doing now.
func (m *Machine) Phase() Phase {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.phase
}

// BootedRevision is the machine revision id ("mr-…") of the last boot (""
// before the first). It keeps its value while the machine reboots.
func (m *Machine) BootedRevision() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.boot == nil {
		return ""
	}
	return m.boot.Revision
}

// Boots is the number of completed boots.
func (m *Machine) Boots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots
}

// Reboots lists the reboots the machine's agents carried out, oldest first.
func (m *Machine) Reboots() []Reboot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Reboot(nil), m.reboots...)
}

// Status returns a snapshot of everything observable about the machine.
func (m *Machine) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Status{
		UUID: m.uuid, MAC: m.mac, Phase: m.phase, Boots: m.boots,
		Reboots:      append([]Reboot(nil), m.reboots...),
		IPXERequests: m.ipxeRequests.Load(),
		Hung:         m.hang, NeverJoin: m.neverJoin, NodeReady: m.nodeReady,
		LastError: m.lastErr, Console: append([]string(nil), m.screen...),
	}
	if m.boot != nil {
		s.Hostname, s.BootedRevision = m.boot.Hostname, m.boot.Revision
	}
	return s
}

// Hang(true) makes the machine's next reboot never come back (and keeps a
// machine that is down down); Hang(false) lets a hung machine boot again.
func (m *Machine) Hang(on bool) {
	m.mu.Lock()
	m.hang = on
	m.mu.Unlock()
	if !on {
		select {
		case m.unhang <- struct{}{}:
		default:
		}
	}
}

// NeverJoin(true) makes the machine boot without its Node ever becoming
// Ready: the Node is created (or kept) NotReady and not handed to kwok. It
// applies at once to a running machine; NeverJoin(false) lets it join.
func (m *Machine) NeverJoin(on bool) {
	m.mu.Lock()
	m.neverJoin = on
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Machine) setPhase(p Phase, msg string) {
	m.mu.Lock()
	if m.phase == p {
		m.mu.Unlock()
		return
	}
	m.phase = p
	m.mu.Unlock()
	m.log.Debug("phase", "phase", string(p), "detail", msg)
	m.emit(EventPhase, msg)
}

func (m *Machine) emit(kind EventKind, msg string) {
	m.emitInstruction(kind, "", msg)
}

func (m *Machine) emitInstruction(kind EventKind, instruction, msg string) {
	if kind == EventError {
		m.mu.Lock()
		m.lastErr = msg
		m.mu.Unlock()
		m.log.Warn(msg)
	}
	if m.fleet.cfg.OnEvent == nil {
		return
	}
	e := Event{At: time.Now(), UUID: m.uuid, Kind: kind, InstructionID: instruction, Message: msg}
	m.mu.Lock()
	e.Phase = m.phase
	if m.boot != nil {
		e.Hostname, e.Revision = m.boot.Hostname, m.boot.Revision
	}
	m.mu.Unlock()
	m.fleet.cfg.OnEvent(e)
}

// console records a line the firmware printed; it also goes into the
// journal the agent reports.
func (m *Machine) console(line string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.screen = appendBounded(m.screen, line, consoleLines)
	m.journal = appendBounded(m.journal, time.Now().UTC().Format("2006-01-02T15:04:05-0700")+" "+m.uuid[:8]+" sim: "+line, agent.DefaultJournalLines)
}

func appendBounded(s []string, v string, n int) []string {
	s = append(s, v)
	if len(s) > n {
		s = append(s[:0:0], s[len(s)-n:]...)
	}
	return s
}

// wait sleeps d, capped by MaxWait; false if ctx ended first.
func (m *Machine) wait(ctx context.Context, d time.Duration) bool {
	if mw := m.fleet.cfg.MaxWait; mw > 0 && d > mw {
		d = mw
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (m *Machine) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rng.Float64() < p
}

func (m *Machine) rebootDuration() time.Duration {
	cfg := m.fleet.cfg
	d := cfg.RebootTime
	if cfg.RebootJitter > 0 {
		m.mu.Lock()
		d += time.Duration(m.rng.Int64N(int64(2*cfg.RebootJitter)+1)) - cfg.RebootJitter
		m.mu.Unlock()
	}
	return max(d, 0)
}

// newBootID is random, not seeded: a simulator restarted on the same
// StateDir must not repeat the boot id its agents persisted.
func (m *Machine) newBootID() string {
	a, b := rand.Uint64(), rand.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xfff, 0x8000|(b>>48)&0x3fff, b&0xffffffffffff)
}

// run is the machine's life: power on, firmware, Ignition, agent, reboot,
// again, until ctx ends.
func (m *Machine) run(ctx context.Context) {
	defer m.setPhase(PhaseOff, "stopped")
	if err := m.writeRoot(); err != nil {
		m.emit(EventError, "cannot write the fake root: "+err.Error())
		return
	}
	for ctx.Err() == nil {
		m.setPhase(PhaseBooting, "powered on")
		bc, bootID, err := m.bootOnce(ctx)
		if err != nil {
			return // ctx ended
		}
		rb := m.runBooted(ctx, bc, bootID)
		if rb == nil {
			return // ctx ended
		}
		if !m.rebootDown(ctx) {
			return
		}
	}
}

// bootOnce runs the firmware until a boot script, then fetches and applies
// the Ignition config. Failures power-cycle the machine, as a person would;
// only ctx ending returns an error.
func (m *Machine) bootOnce(ctx context.Context) (*BootConfig, string, error) {
	for {
		kb, err := m.firmware(ctx)
		if err != nil {
			return nil, "", err
		}
		m.setPhase(PhaseBooting, "booting "+kb.Kernel)
		if kb.IgnitionURL == "" {
			m.emit(EventError, "the boot script gives the kernel no ignition.config.url")
		} else if bc, err := m.ignition(ctx, kb.IgnitionURL); err == nil {
			return bc, m.newBootID(), nil
		} else if ctx.Err() != nil {
			return nil, "", ctx.Err()
		} else {
			m.emit(EventError, "Ignition failed: "+err.Error())
		}
		// Ignition gave up (or there was nothing to fetch): the machine
		// would sit in the emergency shell; power-cycle it.
		if !m.wait(ctx, DefaultUnreachableWait) {
			return nil, "", ctx.Err()
		}
	}
}

// ignition fetches the config as Flatcar's Ignition does: it retries every
// failure with backoff except 404, on which it gives up, and here also after
// 20 attempts (a person would power-cycle the machine).
func (m *Machine) ignition(ctx context.Context, rawURL string) (*BootConfig, error) {
	delay := 200 * time.Millisecond
	var last error
	for attempt := 1; attempt <= 20; attempt++ {
		body, status, err := m.get(ctx, rawURL)
		switch {
		case err != nil:
			last = err
		case status == http.StatusOK:
			bc, err := ParseIgnition(body)
			if err != nil {
				return nil, err
			}
			m.mu.Lock()
			m.boot = bc
			m.boots++
			m.journal = nil
			m.mu.Unlock()
			m.console(fmt.Sprintf("Ignition: applied revision %s as %s", bc.Revision, bc.Hostname))
			m.log.Info("booted", "revision", bc.Revision, "hostname", bc.Hostname)
			m.emit(EventBooted, fmt.Sprintf("booted revision %s as %s (labels %s)", bc.Revision, bc.Hostname, sortedLabels(bc.NodeLabels)))
			return bc, nil
		case status == http.StatusNotFound:
			return nil, fmt.Errorf("GET %s: 404, Ignition gives up", redactURL(rawURL))
		default:
			last = fmt.Errorf("GET %s: HTTP %d: %s", redactURL(rawURL), status, strings.TrimSpace(truncate(string(body), 300)))
		}
		m.console("Ignition: " + last.Error() + "; retrying")
		if !m.wait(ctx, delay) {
			return nil, ctx.Err()
		}
		delay = min(2*delay, 10*time.Second)
	}
	return nil, last
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// runBooted brings the Node up and runs this boot's agent until it asks for
// a reboot (returned) or ctx ends (nil).
func (m *Machine) runBooted(ctx context.Context, bc *BootConfig, bootID string) *Reboot {
	m.reconcileNode(ctx, bc)

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := agent.Config{
		MachineUUID: m.uuid,
		BootID:      bootID,
		Root:        filepath.Join(m.dir, "root"),
		StateFile:   filepath.Join(m.dir, "state.json"),
		HTTPClient:  m.fleet.cfg.HTTPClient,
		Rebooter:    agent.RebooterFunc(func(ctx context.Context, reason string) error { return m.reboot(reason, cancel) }),
		Journal:     agent.JournalFunc(m.journalTail),
		Logger:      m.fleet.cfg.AgentLogger.With("sim_machine", m.uuid),
		Version:     "sim",
	}
	if err := agent.ApplyEnv(&cfg, bc.Env); err != nil {
		m.emit(EventError, "agent env file: "+err.Error())
	}
	if bc.Revision != "" {
		cfg.BootedRevision = bc.Revision // the revision file wins over the env file
	}
	iv := m.fleet.cfg.AgentIntervals
	setIf(&cfg.HeartbeatInterval, iv.Heartbeat)
	setIf(&cfg.ReportInterval, iv.Report)
	setIf(&cfg.PollWait, iv.PollWait)
	setIf(&cfg.MinPollInterval, iv.MinPollInterval)
	setIf(&cfg.RetryInitial, iv.RetryInitial)
	setIf(&cfg.RetryMax, iv.RetryMax)
	setIf(&cfg.RequestTimeout, iv.RequestTimeout)

	m.setPhase(PhaseRunning, "booted "+bc.Revision)
	done := make(chan struct{})
	a, err := agent.New(cfg)
	if err != nil {
		// A machine whose agent cannot start still runs (and its Node
		// too); it just cannot be told to reboot.
		m.emit(EventError, "agent: "+err.Error())
		close(done)
	} else {
		go func() {
			defer close(done)
			_ = a.Run(actx)
		}()
		m.emit(EventAgentStarted, "agent started, boot id "+bootID)
	}
	for {
		select {
		case <-done:
			if ctx.Err() != nil {
				return nil
			}
			m.mu.Lock()
			rb := m.pending
			m.pending = nil
			m.mu.Unlock()
			if rb != nil {
				return rb
			}
			// The agent could not start: wait until ctx ends or a kick.
			done = nil
		case <-m.kick:
			m.reconcileNode(ctx, bc)
		case <-ctx.Done():
			cancel()
			if done != nil {
				<-done
			}
			return nil
		}
	}
}

func setIf(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// reboot is the agent's Rebooter: it records the reboot, stops this boot's
// agent (cancel) and returns, as `systemctl reboot` does. The run loop then
// takes the machine down.
func (m *Machine) reboot(reason string, cancel context.CancelFunc) error {
	if m.chance(m.fleet.cfg.RebootErrorRate) {
		m.emit(EventRebootFailed, "simulated reboot failure: "+reason)
		return errors.New("simulated: the reboot command failed")
	}
	rb := Reboot{At: time.Now()}
	m.mu.Lock()
	if m.boot != nil {
		rb.From = m.boot.Revision
	}
	m.mu.Unlock()
	// The agent persisted the instruction before calling the Rebooter; its
	// state file (agent.md, "Dedup and the state file") names it.
	var st struct {
		LastInstruction *struct {
			ID, Kind, Revision string
		} `json:"last_instruction"`
	}
	if b, err := os.ReadFile(filepath.Join(m.dir, "state.json")); err == nil && json.Unmarshal(b, &st) == nil && st.LastInstruction != nil {
		rb.InstructionID, rb.Kind, rb.Revision = st.LastInstruction.ID, st.LastInstruction.Kind, st.LastInstruction.Revision
	} else if id, ok := strings.CutPrefix(reason, "instruction "); ok {
		rb.InstructionID, _, _ = strings.Cut(id, ":")
	}
	m.mu.Lock()
	m.reboots = append(m.reboots, rb)
	m.pending = &rb
	m.mu.Unlock()
	m.fleet.rebootCount.Add(1)
	m.log.Info("rebooting", "instruction", rb.InstructionID, "revision", rb.Revision)
	m.emitInstruction(EventReboot, rb.InstructionID, reason)
	cancel()
	return nil
}

// rebootDown is the time the machine is down: the Node goes NotReady, the
// machine may hang, then the firmware starts again. False if ctx ended.
func (m *Machine) rebootDown(ctx context.Context) bool {
	m.setPhase(PhaseRebooting, "")
	d := m.rebootDuration()
	fail := m.chance(m.fleet.cfg.FailRate)
	m.mu.Lock()
	m.hang = m.hang || fail
	hang, kept := m.hang, m.kwokKept
	m.mu.Unlock()
	if hang || !kept {
		// A machine that does not come back loses its kubelet's lease.
		m.nodeDown(ctx, "rebooting")
	} else {
		m.nodeRebooting(ctx)
	}
	for {
		m.mu.Lock()
		hung := m.hang
		m.mu.Unlock()
		if !hung {
			break
		}
		m.mu.Lock()
		kept := m.kwokKept
		m.mu.Unlock()
		if kept {
			// Hung after its Node was reported rebooting: the kubelet's
			// lease runs out as for any machine that does not come back.
			m.nodeDown(ctx, "rebooting")
		}
		m.setPhase(PhaseHung, "the reboot does not come back")
		select {
		case <-ctx.Done():
			return false
		case <-m.unhang:
		}
	}
	m.setPhase(PhaseRebooting, "")
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// journalTail is the agent's JournalSource: what the firmware and the
// simulator printed during this boot.
func (m *Machine) journalTail(_ context.Context, lines int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.journal
	if len(j) > lines {
		j = j[len(j)-lines:]
	}
	return append([]string(nil), j...), nil
}

// writeRoot writes the machine's fake /proc and /sys: a small virtual
// server with 4 CPUs, 8 GiB, one disk and one NIC with the machine's MAC.
func (m *Machine) writeRoot() error {
	root := filepath.Join(m.dir, "root")
	files := map[string]string{
		"proc/cpuinfo":                     strings.Repeat("processor\t: 0\nmodel name\t: anvil-sim vCPU\n\n", 4),
		"proc/meminfo":                     "MemTotal:        8388608 kB\n",
		"sys/class/dmi/id/product_uuid":    strings.ToUpper(m.uuid) + "\n",
		"sys/block/vda/size":               "209715200\n",
		"sys/block/vda/queue/rotational":   "0\n",
		"sys/block/vda/device/model":       "anvil-sim disk\n",
		"sys/class/net/eth0/address":       m.mac + "\n",
		"sys/class/net/eth0/speed":         "10000\n",
		"sys/class/net/eth0/device/vendor": "0x1af4\n",
	}
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}
