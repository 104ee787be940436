package plan

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// This file is a pure simulation of the rollout service: a fake world
// (nodes, a boot service that deduplicates instructions by id, agents that
// reboot) and a driver that does what docs/rollout.md tells the service
// layer to do with each Decision. The driver's only durable state is the
// event list; a crash throws away everything else (its folded state) at a
// random point, including between two events of one append and between
// an external action and the report of its outcome.

var t0 = time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC) // a Monday

func uuidOf(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// ---- the world ----

type instr struct {
	id, uuid string
	kind     rollout.InstructionKind
	revision uint64
	status   string // pending, accepted, done, skipped, withdrawn, superseded
}

type node struct {
	uuid          string
	cordoned      bool
	revision      uint64
	down          bool // rebooting
	ready         bool
	bootAt        time.Time // when a rebooting machine comes back
	readyAt       time.Time
	bootingInto   uint64
	pdbBlockTicks int  // the drain is blocked this many more ticks (-1: for ever)
	agentSilent   bool // the agent never accepts instructions
	neverReports  bool // reboots but never comes back with the revision
	notReadyBoots int  // this many more boots come back without the node ever turning Ready
}

type world struct {
	now          time.Time
	nodes        map[string]*node
	instructions []*instr // in order of storing
	reboots      map[string][]string
	bootTicks    int
	readyTicks   int
}

func newWorld(n int, revision uint64) *world {
	w := &world{now: t0, nodes: map[string]*node{}, reboots: map[string][]string{}, bootTicks: 3, readyTicks: 2}
	for i := 1; i <= n; i++ {
		w.nodes[uuidOf(i)] = &node{uuid: uuidOf(i), revision: revision, ready: true}
	}
	return w
}

func (w *world) instr(id string) *instr {
	for _, in := range w.instructions {
		if in.id == id {
			return in
		}
	}
	return nil
}

// store is the boot service's StoreInstruction: deduplicated by id; a
// newer instruction supersedes one not yet accepted.
func (w *world) store(uuid, id string, kind rollout.InstructionKind, rev uint64) {
	if w.instr(id) != nil {
		return
	}
	for _, in := range w.instructions {
		if in.uuid == uuid && in.status == "pending" {
			in.status = "superseded"
		}
	}
	w.instructions = append(w.instructions, &instr{id: id, uuid: uuid, kind: kind, revision: rev, status: "pending"})
}

func (w *world) withdraw(id string) {
	if in := w.instr(id); in != nil && in.status == "pending" {
		in.status = "withdrawn"
	}
}

// tick advances one minute: agents accept pending instructions and
// reboot, machines come back and become Ready.
func (w *world) tick() {
	w.now = w.now.Add(time.Minute)
	for _, in := range w.instructions {
		n := w.nodes[in.uuid]
		if in.status != "pending" || n.agentSilent || n.down {
			continue
		}
		if in.kind == rollout.KindReboot && n.revision == in.revision {
			in.status = "skipped"
			continue
		}
		in.status = "accepted"
		w.reboots[in.uuid] = append(w.reboots[in.uuid], in.id)
		n.down, n.ready, n.bootingInto = true, false, in.revision
		n.bootAt = w.now.Add(time.Duration(w.bootTicks) * time.Minute)
	}
	for _, n := range w.nodes {
		if n.cordoned && n.pdbBlockTicks > 0 {
			n.pdbBlockTicks-- // the budget's pods become healthy elsewhere
		}
		if n.down && !w.now.Before(n.bootAt) && !n.neverReports {
			n.down, n.revision = false, n.bootingInto
			n.readyAt = w.now.Add(time.Duration(w.readyTicks) * time.Minute)
			if n.notReadyBoots > 0 {
				n.notReadyBoots--
				n.readyAt = time.Time{}
			}
			for _, in := range w.instructions {
				if in.uuid == n.uuid && in.status == "accepted" {
					in.status = "done"
				}
			}
		}
		if !n.down && !n.ready && !n.readyAt.IsZero() && !w.now.Before(n.readyAt) {
			n.ready = true
		}
	}
}

// idle reports whether nothing in the world will change by itself: no
// instruction an agent will take, no machine that will come back or
// become Ready, no budget that will free up.
func (w *world) idle() bool {
	for _, in := range w.instructions {
		if in.status == "pending" && !w.nodes[in.uuid].agentSilent {
			return false
		}
	}
	for _, n := range w.nodes {
		if (n.down && !n.neverReports) || (!n.down && !n.ready && !n.readyAt.IsZero()) || (n.cordoned && n.pdbBlockTicks > 0) {
			return false
		}
	}
	return true
}

// advance moves to the next minute, or, when the world is idle, straight
// to the plan's Wake: the simulation trusts Wake to say when the plan can
// change by time alone (a missed wake shows as a rollout that stalls).
func (d *driver) advance() {
	if dec := Next(d.state, d.w.now); d.w.idle() && dec.Wake.After(d.w.now.Add(time.Minute)) {
		d.w.now = dec.Wake.Add(-time.Minute)
	}
	d.w.tick()
}

// out counts the machines the world sees out of service.
func (w *world) out(uuids []string) int {
	n := 0
	for _, u := range uuids {
		if x := w.nodes[u]; x.cordoned || x.down || !x.ready {
			n++
		}
	}
	return n
}

// ---- the driver (the service layer, as docs/rollout.md describes it) ----

type driver struct {
	t       testing.TB
	w       *world
	id      string
	events  []any         // the durable log: all that survives a crash
	state   rollout.State // in memory: lost on a crash
	rng     *rand.Rand    // crash injection; nil: never
	crashP  float64
	crashes int
	others  map[string]*driver // other rollouts, for `after`
	// checks makes RecordChecks results; nil: all pass.
	checks func() []rollout.CheckResult
	trace  []string
	// decideErrs counts refused commands (stale proposals).
	refused int
	maxOut  int
}

type crashed struct{}

func newDriver(t testing.TB, w *world, start rollout.Start) *driver {
	d := &driver{t: t, w: w, id: start.ID, others: map[string]*driver{}}
	evs, err := rollout.Decide(rollout.State{}, start, w.now)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	d.appendAll(evs)
	return d
}

func (d *driver) maybeCrash() {
	if d.rng != nil && d.rng.Float64() < d.crashP {
		panic(crashed{})
	}
}

// restart rebuilds everything from the log.
func (d *driver) restart() {
	d.crashes++
	d.state = fold(d.events)
}

func fold(evs []any) rollout.State {
	var s rollout.State
	for _, e := range evs {
		s.Apply(e)
	}
	return s
}

func (d *driver) appendAll(evs []any) {
	for _, e := range evs {
		d.events = append(d.events, e)
		d.state.Apply(e)
		d.record(e)
		d.maybeCrash() // a crash between two events of one append
	}
}

func (d *driver) record(e any) {
	switch e := e.(type) {
	case rollout.MachineBegun:
		d.trace = append(d.trace, "begin "+d.host(e.Machine))
	case rollout.StepStarted:
		d.trace = append(d.trace, fmt.Sprintf("%s %s#%d", d.host(e.Machine), e.Step, e.Attempt))
	case rollout.StepFailed:
		d.trace = append(d.trace, fmt.Sprintf("%s %s failed", d.host(e.Machine), e.Step))
	case rollout.MachineDone:
		d.trace = append(d.trace, "done "+d.host(e.Machine))
	case rollout.MachineReleased:
		d.trace = append(d.trace, "released "+d.host(e.Machine))
	}
}

func (d *driver) host(uuid string) string {
	if m, ok := d.state.Machine(uuid); ok {
		return m.Hostname
	}
	return uuid
}

// decide decides cmd on the current state and appends; a refusal (a
// stale proposal) is counted and reported as false.
func (d *driver) decide(cmd rollout.Command) bool {
	evs, err := rollout.Decide(d.state, cmd, d.w.now)
	if err != nil {
		if k := errs.KindOf(err); k != errs.KindConflict {
			d.t.Fatalf("%s refused with %s: %v", cmd.CommandType(), k, err)
		}
		d.refused++
		return false
	}
	d.appendAll(evs)
	return len(evs) > 0
}

// settle plans and acts until nothing changes at this instant; a crash
// restarts from the log and goes on.
func (d *driver) settle() {
	for range 2000 {
		progressed, ok := d.once()
		if !ok {
			d.restart()
			continue
		}
		if !progressed {
			return
		}
	}
	d.t.Fatalf("no quiescence at %s", d.w.now)
}

func (d *driver) once() (progressed, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, is := r.(crashed); !is {
				panic(r)
			}
			ok = false
		}
	}()
	d.maybeCrash()
	dec := Next(d.state, d.w.now)
	d.checkDecision(dec)
	for _, c := range dec.Commands {
		if !d.decide(c) {
			return true, true // refused or no-op: plan again
		}
		progressed = true
	}
	if progressed {
		return true, true
	}
	for _, a := range dec.Actions {
		if d.act(a) {
			return true, true
		}
	}
	return false, true
}

// act carries out one action against the world and reports its outcome.
func (d *driver) act(a Action) bool {
	w := d.w
	report := func(c rollout.Command) bool {
		d.checkWorld()
		d.maybeCrash() // after the world changed, before the report
		return d.decide(c)
	}
	succeed := func(msg string) bool {
		return report(rollout.SucceedStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt, Message: msg})
	}
	switch a.Kind {
	case RunChecks:
		var rs []rollout.CheckResult
		if d.checks != nil {
			rs = d.checks()
		} else {
			for _, n := range rollout.RequiredChecks {
				rs = append(rs, rollout.CheckResult{Name: n, Passed: true})
			}
		}
		return report(rollout.RecordChecks{Results: rs})
	case WaitForRollout:
		o := d.others[a.Rollout]
		if o == nil {
			d.t.Fatalf("unknown rollout %s", a.Rollout)
		}
		if st := o.state.Status(); st == rollout.StatusSucceeded || st == rollout.StatusAborted {
			return report(rollout.ResolveDependency{Rollout: a.Rollout, Outcome: st})
		}
		return false
	}
	n := w.nodes[a.Machine]
	switch a.Kind {
	case Cordon:
		n.cordoned = true
		return succeed("cordoned")
	case Drain:
		if n.pdbBlockTicks != 0 {
			m, _ := d.state.Machine(a.Machine)
			return report(rollout.RecordDrainBlocked{Machine: a.Machine, Attempt: a.Attempt, Pod: "shop/cart-0", Budget: "shop/cart",
				WaitedFor: w.now.Sub(m.StepStartedAt), Message: "Cannot evict pod as it would violate the pod's disruption budget."})
		}
		return succeed("3 pods evicted")
	case IssueReboot:
		m, _ := d.state.Machine(a.Machine)
		if a.InstructionID != m.InstructionID {
			d.t.Fatalf("re-drive with instruction %s, the log says %s", a.InstructionID, m.InstructionID)
		}
		w.store(a.Machine, a.InstructionID, a.InstructionKind, a.Revision)
		d.maybeCrash()
		switch w.instr(a.InstructionID).status {
		case "accepted", "done", "skipped":
			return succeed("the agent accepted instruction " + a.InstructionID)
		case "superseded", "withdrawn":
			return report(rollout.FailStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt, Reason: "instruction " + w.instr(a.InstructionID).status})
		}
		return false
	case ConfirmReboot:
		w.withdraw(a.InstructionID)
		d.maybeCrash()
		in := w.instr(a.InstructionID)
		switch {
		case in != nil && (in.status == "accepted" || in.status == "done" || in.status == "skipped"):
			return succeed("the agent had accepted instruction " + a.InstructionID)
		case a.Why == "aborted":
			return report(rollout.CancelStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt, Reason: "instruction withdrawn before the agent accepted it"})
		}
		return report(rollout.FailStep{Machine: a.Machine, Step: a.Step, Attempt: a.Attempt, TimedOut: true,
			Reason: "the agent did not accept instruction " + a.InstructionID + " in time; withdrawn"})
	case WaitBoot:
		if !n.down && n.revision == a.Revision {
			return succeed(fmt.Sprintf("the agent reports revision %d", a.Revision))
		}
		return false
	case WaitReady:
		if n.ready && !n.down {
			return succeed("node Ready")
		}
		return false
	case Uncordon:
		n.cordoned = false
		return succeed("uncordoned")
	}
	d.t.Fatalf("unknown action %v", a)
	return false
}

// checkDecision asserts what must hold of every decision.
func (d *driver) checkDecision(dec Decision) {
	t, s := d.t, &d.state
	t.Helper()
	if again := Next(s.Clone(), d.w.now); !reflect.DeepEqual(again, dec) {
		t.Fatalf("Next is not idempotent:\n%+v\n%+v", dec, again)
	}
	for _, a := range dec.Actions {
		if a.Kind == IssueReboot || a.Kind == ConfirmReboot {
			m, _ := s.Machine(a.Machine)
			if m.Step != rollout.StepReboot || m.StepStatus != rollout.StepStatusRunning || a.InstructionID != m.InstructionID {
				t.Fatalf("%s for %s does not re-drive the recorded reboot %s (%+v)", a.Kind, m.Hostname, m.InstructionID, m)
			}
		}
	}
	for _, c := range dec.Commands {
		if c, ok := c.(rollout.StartStep); ok && c.Step == rollout.StepReboot {
			m, _ := s.Machine(c.Machine)
			if slices.Contains(m.Instructions, c.InstructionID) || (m.Step == rollout.StepReboot && m.StepStatus == rollout.StepStatusRunning) {
				t.Fatalf("a second reboot proposed for %s: %+v", m.Hostname, c)
			}
		}
	}
}

// checkInvariants asserts what must hold of the state and the world at
// every instant.
func (d *driver) checkInvariants() {
	t, s := d.t, &d.state
	t.Helper()
	if got := fold(d.events); !reflect.DeepEqual(got.Machines, s.Machines) || got.Status() != s.Status() {
		t.Fatalf("the folded log differs from the state in memory")
	}
	budget := s.Budget()
	var uuids []string
	cpOut := 0
	for i := range s.Machines {
		m := &s.Machines[i]
		uuids = append(uuids, m.UUID)
		if m.ControlPlane && m.Phase.Out() {
			cpOut++
		}
		// The state never claims a node is uncordoned (or untouched) while
		// the world has it cordoned.
		if n := d.w.nodes[m.UUID]; n.cordoned && (m.Node == rollout.NodeUncordoned || m.Node == rollout.NodeUntouched) {
			t.Fatalf("%s is cordoned but the state says %s", m.Hostname, m.Node)
		}
		// Only an attempt that the log records can have reached the boot
		// service or rebooted the machine.
		for _, in := range d.w.instructions {
			if in.uuid == m.UUID && s.ID == d.id && !slices.Contains(m.Instructions, in.id) {
				t.Fatalf("instruction %s for %s is not in the log", in.id, m.Hostname)
			}
		}
		for _, id := range d.w.reboots[m.UUID] {
			if !slices.Contains(m.Instructions, id) {
				t.Fatalf("%s rebooted for instruction %s, which the log does not hold", m.Hostname, id)
			}
		}
	}
	if out := s.Out(); out > budget {
		t.Fatalf("%d machines out, budget %d", out, budget)
	}
	if out := d.w.out(uuids); out > budget {
		t.Fatalf("the world has %d machines out, budget %d", out, budget)
	}
	d.maxOut = max(d.maxOut, d.w.out(uuids), s.Out())
	if cpOut > 1 {
		t.Fatalf("%d control-plane machines out", cpOut)
	}
}

// checkWorld asserts the world never has more machines out than allowed.
func (d *driver) checkWorld() {
	var uuids []string
	for i := range d.state.Machines {
		uuids = append(uuids, d.state.Machines[i].UUID)
	}
	if out := d.w.out(uuids); out > d.state.Budget() {
		d.t.Fatalf("the world has %d machines out, budget %d", out, d.state.Budget())
	}
}

// run drives the rollout until it is final or failed and settled, or
// until maxTicks.
func (d *driver) run(maxTicks int) {
	for range maxTicks {
		d.settle()
		d.checkInvariants()
		st := d.state.Status()
		if st.Final() || (st == rollout.StatusFailed && len(Next(d.state, d.w.now).Commands) == 0) {
			return
		}
		d.advance()
	}
}

// ---- fixtures ----

func machines(n int) []rollout.Machine {
	ms := make([]rollout.Machine, n)
	for i := range ms {
		ms[i] = rollout.Machine{UUID: uuidOf(i + 1), Hostname: fmt.Sprintf("m%02d", i+1), CurrentRevision: 1}
	}
	return ms
}

func startCmd(id string, ms []rollout.Machine, maxUnavailable string) rollout.Start {
	return rollout.Start{
		ID: id, Pool: "workers", Cluster: "prod", Revision: 2, Machines: ms, RequestedBy: "token:t1 (ci)",
		Strategy: rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: values.IntOrPercent(maxUnavailable)}},
	}
}

// ---- the properties ----

// TestTenMachinesMaxUnavailableTwo: the exact order, never more than two
// out, and every machine done and uncordoned at the target.
func TestTenMachinesMaxUnavailableTwo(t *testing.T) {
	w := newWorld(10, 1)
	d := newDriver(t, w, startCmd("r1", machines(10), "2"))
	d.run(500)
	if st := d.state.Status(); st != rollout.StatusSucceeded {
		t.Fatalf("status %s: %s", st, d.state.Reason)
	}
	if d.maxOut != 2 {
		t.Errorf("at most %d machines were out at once; want exactly 2", d.maxOut)
	}
	var order []string
	perMachine := map[string][]string{}
	for _, line := range d.trace {
		var host, rest string
		fmt.Sscanf(line, "%s %s", &host, &rest)
		switch host {
		case "begin", "done":
			order = append(order, line)
		default:
			perMachine[host] = append(perMachine[host], rest)
		}
	}
	// A slot frees the moment a machine is done, and the next machine
	// takes it at once: a sliding window of two.
	want := []string{
		"begin m01", "begin m02", "done m01", "begin m03", "done m02", "begin m04",
		"done m03", "begin m05", "done m04", "begin m06", "done m05", "begin m07",
		"done m06", "begin m08", "done m07", "begin m09", "done m08", "begin m10",
		"done m09", "done m10",
	}
	if !slices.Equal(order, want) {
		t.Errorf("order:\n%v\nwant\n%v", order, want)
	}
	steps := []string{"cordon#1", "drain#1", "reboot#1", "wait_boot#1", "wait_ready#1", "uncordon#1"}
	for i := 1; i <= 10; i++ {
		h := fmt.Sprintf("m%02d", i)
		if !slices.Equal(perMachine[h], steps) {
			t.Errorf("%s steps %v", h, perMachine[h])
		}
		n := w.nodes[uuidOf(i)]
		if n.cordoned || !n.ready || n.revision != 2 || len(w.reboots[uuidOf(i)]) != 1 {
			t.Errorf("%s: %+v, reboots %v", h, n, w.reboots[uuidOf(i)])
		}
	}
}

// TestCrashAnywhere kills the driver at random points (between the two
// events of an append, between an action and its report, before a plan)
// and rebuilds it from the log alone: the same invariants hold, every
// machine ends done, and no machine ever saw two reboot instructions.
func TestCrashAnywhere(t *testing.T) {
	seeds := 300
	if testing.Short() || raceEnabled {
		seeds = 40
	}
	for seed := range testSeeds(t, seeds) {
		w := newWorld(10, 1)
		d := newDriver(t, w, startCmd("r1", machines(10), "2"))
		d.rng, d.crashP = rand.New(rand.NewPCG(seed, 7)), 0.05+float64(seed%10)/40
		d.run(2000)
		if st := d.state.Status(); st != rollout.StatusSucceeded {
			t.Fatalf("seed %d: status %s after %d crashes", seed, st, d.crashes)
		}
		if d.crashes == 0 {
			t.Fatalf("seed %d: no crash injected", seed)
		}
		for i := 1; i <= 10; i++ {
			u := uuidOf(i)
			var ids []string
			for _, in := range w.instructions {
				if in.uuid == u {
					ids = append(ids, in.id)
				}
			}
			if len(ids) != 1 || len(w.reboots[u]) != 1 {
				t.Fatalf("seed %d: machine %d got instructions %v and rebooted %v", seed, i, ids, w.reboots[u])
			}
			if n := w.nodes[u]; n.cordoned || !n.ready || n.revision != 2 {
				t.Fatalf("seed %d: machine %d ended %+v", seed, i, n)
			}
		}
	}
}

// testSeeds is the seeds of a test's random scenarios: 0 to n-1, or only
// ANVIL_TEST_SEED when it is set (docs/e2e.md#random-seeds-in-tests). A
// failure names the seed it happened at, even one the driver reports
// without it, so ANVIL_TEST_SEED=<seed> repeats just that scenario.
func testSeeds(t testing.TB, n int) iter.Seq[uint64] {
	t.Helper()
	var seeds []uint64
	if v, ok := eventstest.SeedFromEnv(t); ok {
		seeds = []uint64{v}
		t.Logf("random seed %d (ANVIL_TEST_SEED)", v)
	} else {
		for seed := range uint64(n) {
			seeds = append(seeds, seed)
		}
		t.Logf("random seeds 0 to %d (ANVIL_TEST_SEED=<seed> runs one)", n-1)
	}
	var current uint64
	running := false
	t.Cleanup(func() {
		if running && t.Failed() {
			t.Logf("failed at random seed %d: ANVIL_TEST_SEED=%d repeats it", current, current)
		}
	})
	return func(yield func(uint64) bool) {
		for _, seed := range seeds {
			current, running = seed, true
			if !yield(seed) {
				break
			}
		}
		running = false
	}
}
