package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// bootStub answers one machine's instruction as set; the registry stub
// counts its reads. Both are the other services' answers, which this
// unit of the step's logic decides on.
type bootStub struct {
	mu sync.Mutex
	in *bootapi.Instruction // nil: not found
}

func (b *bootStub) set(in *bootapi.Instruction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.in = in
}

func (b *bootStub) Instruction(context.Context, string, string, string) (bootapi.Instruction, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.in == nil {
		return bootapi.Instruction{}, errs.NotFound("no such instruction")
	}
	return *b.in, nil
}

func (*bootStub) Follow(string, string) func() { return func() {} }

type registryStub struct {
	Registry
	mu      sync.Mutex
	machine regapi.Machine
	reads   int
	refuse  map[string]error // by uuid
}

func (r *registryStub) Machine(_ context.Context, _, uuid string) (regapi.Machine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if err := r.refuse[uuid]; err != nil {
		return regapi.Machine{}, err
	}
	m := r.machine
	m.UUID = uuid
	return m, nil
}

func (r *registryStub) readCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// waitBootExecutor returns a wait_boot executor for machine m1 at
// revision 2 and the channel its outcome arrives on.
func waitBootExecutor(a *App, instructionID string) (*executor, chan message) {
	inbox := make(chan message, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := &driver{a: a, org: "acme", id: "ro-1", log: log, inbox: inbox}
	act := plan.Action{Kind: plan.WaitBoot, Machine: "m1", Node: "n1", Step: rollout.StepWaitBoot, Attempt: 1, Revision: 2}
	return &executor{d: d, a: a, act: act, log: log, instructionID: instructionID, kind: rollout.KindReboot}, inbox
}

// While the agent's instruction is accepted and unsettled, wait_boot
// waits for the boot service to settle it and reads the registry only
// every Replan (the boot service settles it before it reports the
// booted revision to the registry); without an instruction to tell, it
// reads the registry at every try.
func TestWaitBootAsksTheRegistryOnlyWhenTheInstructionCannotTell(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	accepted := bootapi.Instruction{ID: "in-1", Status: bootapi.StatusAccepted, AcceptedAt: start}
	cases := []struct {
		name        string
		instruction string
		in          *bootapi.Instruction
		// then, after the executor has tried a few times:
		advance  time.Duration
		settle   *bootapi.Instruction
		want     string // in the step's outcome
		minReads int    // registry reads before the outcome, at least
		maxReads int    // and at most
	}{
		{name: "the boot service settles it", instruction: "in-1", in: &accepted,
			settle: &bootapi.Instruction{ID: "in-1", Status: bootapi.StatusDone, AcceptedAt: start},
			want:   "booted revision 2", maxReads: 0},
		{name: "the registry knows after Replan", instruction: "in-1", in: &accepted,
			advance: 31 * time.Second, want: "the agent reports revision 2", minReads: 1, maxReads: 1},
		{name: "no instruction", instruction: "",
			want: "the agent reports revision 2", minReads: 1, maxReads: 1},
		{name: "the instruction is not found", instruction: "in-1",
			want: "the agent reports revision 2", minReads: 1, maxReads: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &stepClock{now: start}
			reg := &registryStub{machine: regapi.Machine{CurrentRevision: 2, CurrentRevisionAt: start.Add(time.Second)}}
			boot := &bootStub{in: tc.in}
			a := &App{Registry: reg, Boot: boot, Now: clk.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Settings: Settings{Poll: time.Millisecond, Replan: 30 * time.Second}}
			a.Defaults()
			x, inbox := waitBootExecutor(a, tc.instruction)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan struct{})
			go func() { defer close(done); x.waitBoot(ctx) }()
			if tc.settle != nil || tc.advance > 0 {
				// Let it try many times (Poll is 1 ms) before the change.
				select {
				case m := <-inbox:
					t.Fatalf("the step ended before the instruction changed: %+v", m.report)
				case <-time.After(100 * time.Millisecond):
				}
				if n := reg.readCount(); n != 0 {
					t.Fatalf("%d registry reads while the accepted instruction was unsettled, before Replan", n)
				}
				boot.set(tc.settle)
				if tc.settle == nil {
					boot.set(tc.in)
				}
				clk.advance(tc.advance)
			}
			var m message
			select {
			case m = <-inbox:
			case <-ctx.Done():
				t.Fatal("the step did not end")
			}
			cancel()
			<-done
			ok, isSuccess := m.report.(rollout.SucceedStep)
			if !isSuccess || !strings.Contains(ok.Message, tc.want) {
				t.Fatalf("outcome %+v, want a success saying %q", m.report, tc.want)
			}
			if n := reg.readCount(); n < tc.minReads || n > tc.maxReads {
				t.Fatalf("%d registry reads, want %d to %d", n, tc.minReads, tc.maxReads)
			}
		})
	}
}

// The checks read every machine of the rollout from the registry, a few
// at once: each machine once; one the registry refuses for good is left
// out; any other refusal is the error.
func TestRegistryMachinesReadsEachOnce(t *testing.T) {
	var ms []rollout.MachineState
	for i := range 100 {
		ms = append(ms, rollout.MachineState{Machine: rollout.Machine{UUID: "m" + string(rune('a'+i%26)) + string(rune('a'+i/26))}})
	}
	reg := &registryStub{refuse: map[string]error{"mba": errs.NotFound("machine mba does not exist")}}
	a := &App{Registry: reg}
	known, err := a.registryMachines(context.Background(), "acme", ms)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) != 99 || reg.readCount() != 100 {
		t.Fatalf("%d machines known after %d reads, want 99 after 100", len(known), reg.readCount())
	}
	if _, ok := known["mba"]; ok {
		t.Fatal("the machine the registry does not know is in the answer")
	}
	if known["mcd"].UUID != "mcd" {
		t.Fatalf("machine mcd: %+v", known["mcd"])
	}

	reg = &registryStub{refuse: map[string]error{"mbb": errs.Unavailable("the registry is busy")}}
	a.Registry = reg
	if _, err := a.registryMachines(context.Background(), "acme", ms); errs.KindOf(err) != errs.KindUnavailable {
		t.Fatalf("err %v, want the registry's unavailable", err)
	}
	if _, err := a.registryMachines(context.Background(), "acme", nil); err != nil {
		t.Fatalf("no machines: %v", err)
	}
}
