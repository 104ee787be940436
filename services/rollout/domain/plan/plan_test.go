package plan

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// history decides commands in order on a fresh rollout, failing on error.
func history(t *testing.T, start rollout.Start, steps ...func(s rollout.State) (rollout.Command, time.Time)) rollout.State {
	t.Helper()
	var s rollout.State
	apply := func(c rollout.Command, now time.Time) {
		evs, err := rollout.Decide(s, c, now)
		if err != nil {
			t.Fatalf("%s: %v", c.CommandType(), err)
		}
		for _, e := range evs {
			s.Apply(e)
		}
	}
	apply(start, t0)
	for _, st := range steps {
		c, now := st(s)
		apply(c, now)
	}
	return s
}

func at(c rollout.Command, now time.Time) func(rollout.State) (rollout.Command, time.Time) {
	return func(rollout.State) (rollout.Command, time.Time) { return c, now }
}

func checked() func(rollout.State) (rollout.Command, time.Time) {
	return at(rollout.RecordChecks{Results: passing()}, t0)
}

// upTo starts machine i's steps and lets each succeed, up to step
// (started, running).
func upTo(i int, step rollout.Step, now time.Time) []func(rollout.State) (rollout.Command, time.Time) {
	u := uuidOf(i)
	out := []func(rollout.State) (rollout.Command, time.Time){at(rollout.BeginMachine{Machine: u}, now)}
	for _, st := range rollout.Steps {
		c := rollout.StartStep{Machine: u, Step: st, Attempt: 1}
		if st == rollout.StepReboot {
			c.InstructionID = rollout.InstructionID("r1", u, 1)
		}
		out = append(out, at(c, now))
		if st == step {
			break
		}
		out = append(out, at(rollout.SucceedStep{Machine: u, Step: st, Attempt: 1}, now))
	}
	return out
}

func TestNext(t *testing.T) {
	st := startCmd("r1", machines(3), "2")
	withAfter := st
	withAfter.After = "r0"
	grace := st
	g := values.Duration(30 * time.Second)
	grace.Strategy.DrainGracePeriod = &g
	paused := st
	paused.Strategy.Pause = values.Duration(10 * time.Minute)
	shortDrain := st
	shortDrain.Strategy.DrainTimeout = values.Duration(30 * time.Second)

	type step = func(rollout.State) (rollout.Command, time.Time)
	seq := func(parts ...any) []step {
		var out []step
		for _, p := range parts {
			switch p := p.(type) {
			case step:
				out = append(out, p)
			case []step:
				out = append(out, p...)
			}
		}
		return out
	}
	u1, u2 := uuidOf(1), uuidOf(2)
	id1 := rollout.InstructionID("r1", u1, 1)
	later := t0.Add(20 * time.Minute)

	for _, tc := range []struct {
		name  string
		start rollout.Start
		steps []step
		now   time.Time
		want  Decision
	}{
		{name: "new rollout runs its checks", start: st, now: t0,
			want: Decision{Actions: []Action{{Kind: RunChecks}}, Waiting: []rollout.Block{{Reason: rollout.BlockChecks, Machine: u1, Message: "the sanity checks have not passed"}}}},
		{name: "waits for the rollout it comes after", start: withAfter, now: t0,
			want: Decision{Actions: []Action{{Kind: WaitForRollout, Rollout: "r0"}}, Waiting: []rollout.Block{{Reason: rollout.BlockDependency, Machine: u1, Message: "waiting for rollout r0 to succeed"}}}},
		{name: "paused before the checks runs none", start: st, steps: seq(at(rollout.Pause{}, t0)), now: t0,
			want: Decision{Waiting: []rollout.Block{{Reason: rollout.BlockPaused, Machine: u1, Message: "the rollout is paused"}}}},
		{name: "begins the first two in order", start: st, steps: seq(checked()), now: t0,
			want: Decision{Commands: []rollout.Command{rollout.BeginMachine{Machine: u1}, rollout.BeginMachine{Machine: u2}}}},
		{name: "a begun machine cordons; the budget is full", start: st, steps: seq(checked(), at(rollout.BeginMachine{Machine: u1}, t0), at(rollout.BeginMachine{Machine: u2}, t0)), now: t0,
			want: Decision{
				Commands: []rollout.Command{rollout.StartStep{Machine: u1, Step: rollout.StepCordon, Attempt: 1}, rollout.StartStep{Machine: u2, Step: rollout.StepCordon, Attempt: 1}},
				Waiting:  []rollout.Block{{Reason: rollout.BlockBudget, Machine: uuidOf(3), Message: "2 of at most 2 machines are out (maxUnavailable 2 of 3)"}},
			}},
		{name: "a running drain is re-driven with its grace period", start: grace, steps: seq(checked(), upTo(1, rollout.StepDrain, t0)), now: t0.Add(time.Minute),
			want: Decision{
				Actions:  []Action{{Kind: Drain, Machine: u1, Node: "m01", Step: rollout.StepDrain, Attempt: 1, Deadline: t0.Add(15 * time.Minute), GracePeriod: ptr(30 * time.Second)}},
				Commands: []rollout.Command{rollout.BeginMachine{Machine: u2}},
				Wake:     t0.Add(15 * time.Minute),
			}},
		{name: "the reboot step proposes its deterministic instruction id", start: st, steps: seq(checked(), upTo(1, rollout.StepDrain, t0), at(rollout.SucceedStep{Machine: u1, Step: rollout.StepDrain, Attempt: 1}, t0), at(rollout.BeginMachine{Machine: u2}, t0)), now: t0,
			want: Decision{Commands: []rollout.Command{
				rollout.StartStep{Machine: u1, Step: rollout.StepReboot, Attempt: 1, InstructionID: id1},
				rollout.StartStep{Machine: u2, Step: rollout.StepCordon, Attempt: 1},
			}, Waiting: []rollout.Block{{Reason: rollout.BlockBudget, Machine: uuidOf(3), Message: "2 of at most 2 machines are out (maxUnavailable 2 of 3)"}}}},
		{name: "a started reboot is re-driven with the same id, never started again", start: st, steps: seq(checked(), upTo(1, rollout.StepReboot, t0)), now: t0.Add(time.Minute),
			want: Decision{
				Actions:  []Action{{Kind: IssueReboot, Machine: u1, Node: "m01", Step: rollout.StepReboot, Attempt: 1, Deadline: t0.Add(15 * time.Minute), InstructionID: id1, InstructionKind: rollout.KindReboot, Pool: "workers", Revision: 2}},
				Commands: []rollout.Command{rollout.BeginMachine{Machine: u2}},
				Wake:     t0.Add(15 * time.Minute),
			}},
		{name: "a reboot past its deadline is confirmed with the boot service", start: st, steps: seq(checked(), upTo(1, rollout.StepReboot, t0)), now: later,
			want: Decision{
				Actions:  []Action{{Kind: ConfirmReboot, Machine: u1, Node: "m01", Step: rollout.StepReboot, Attempt: 1, Deadline: t0.Add(15 * time.Minute), InstructionID: id1, InstructionKind: rollout.KindReboot, Pool: "workers", Revision: 2, Why: "timed out"}},
				Commands: []rollout.Command{rollout.BeginMachine{Machine: u2}},
			}},
		{name: "a cordon past its deadline fails; nothing begins this round", start: st, steps: seq(checked(), upTo(1, rollout.StepCordon, t0)), now: later,
			want: Decision{Commands: []rollout.Command{rollout.FailStep{Machine: u1, Step: rollout.StepCordon, Attempt: 1, Reason: "cordon timed out after 5m0s", TimedOut: true}}}},
		// The block was reported 286ms into the drain and not again (at most
		// once a minute): the reason says how long the drain really waited.
		{name: "a blocked drain past its deadline says how long it waited", start: shortDrain,
			steps: seq(checked(), upTo(1, rollout.StepDrain, t0), at(rollout.RecordDrainBlocked{Machine: u1, Attempt: 1, Pod: "shop/cart-0", Budget: "shop/cart", WaitedFor: 286 * time.Millisecond}, t0.Add(286*time.Millisecond))),
			now:   t0.Add(30 * time.Second),
			want: Decision{Commands: []rollout.Command{rollout.FailStep{Machine: u1, Step: rollout.StepDrain, Attempt: 1, TimedOut: true,
				Reason: "drain timed out after 30s; pod shop/cart-0 was blocked by PodDisruptionBudget shop/cart (waited 30s)"}}}},
		{name: "a blocked drain timed out late waited until now", start: shortDrain,
			steps: seq(checked(), upTo(1, rollout.StepDrain, t0), at(rollout.RecordDrainBlocked{Machine: u1, Attempt: 1, Pod: "shop/cart-0", Budget: "shop/cart", WaitedFor: 286 * time.Millisecond}, t0.Add(286*time.Millisecond))),
			now:   t0.Add(42 * time.Second),
			want: Decision{Commands: []rollout.Command{rollout.FailStep{Machine: u1, Step: rollout.StepDrain, Attempt: 1, TimedOut: true,
				Reason: "drain timed out after 30s; pod shop/cart-0 was blocked by PodDisruptionBudget shop/cart (waited 42s)"}}}},
		{name: "a failed machine halts the rollout", start: st, steps: seq(checked(), upTo(1, rollout.StepCordon, t0), upTo(2, rollout.StepDrain, t0), at(rollout.FailStep{Machine: u1, Step: rollout.StepCordon, Attempt: 1, Reason: "forbidden"}, t0)), now: t0,
			want: Decision{
				Actions: []Action{{Kind: Drain, Machine: u2, Node: "m02", Step: rollout.StepDrain, Attempt: 1, Deadline: t0.Add(15 * time.Minute)}},
				Waiting: []rollout.Block{{Reason: rollout.BlockHalted, Machine: uuidOf(3), Message: "machine m01 failed at cordon: forbidden; its node stays cordoned; no new machine begins until a retry or an abort"}},
				Wake:    t0.Add(15 * time.Minute),
			}},
		{name: "the last uncordon completes the machine", start: st, steps: seq(checked(), upTo(1, rollout.StepUncordon, t0), at(rollout.SucceedStep{Machine: u1, Step: rollout.StepUncordon, Attempt: 1}, t0)), now: t0,
			want: Decision{Commands: []rollout.Command{rollout.CompleteMachine{Machine: u1}}}},
		{name: "the pause between machines", start: paused, steps: seq(checked(), upTo(1, rollout.StepUncordon, t0), at(rollout.SucceedStep{Machine: u1, Step: rollout.StepUncordon, Attempt: 1}, t0), at(rollout.CompleteMachine{Machine: u1}, t0)), now: t0.Add(time.Minute),
			want: Decision{
				Waiting: []rollout.Block{{Reason: rollout.BlockPause, Machine: u2, Until: t0.Add(10 * time.Minute), Message: "pausing 10m0s between machines, until 2025-06-02T09:10:00Z"}},
				Wake:    t0.Add(10 * time.Minute),
			}},
		{name: "abort cancels a running drain", start: st, steps: seq(checked(), upTo(1, rollout.StepDrain, t0), at(rollout.Abort{}, t0)), now: t0,
			want: Decision{
				Commands: []rollout.Command{rollout.CancelStep{Machine: u1, Step: rollout.StepDrain, Attempt: 1, Reason: "the rollout is being aborted"}},
				Waiting:  []rollout.Block{{Reason: rollout.BlockAborting, Machine: u2, Message: "the rollout is being aborted"}},
			}},
		{name: "abort asks whether a running reboot was accepted", start: st, steps: seq(checked(), upTo(1, rollout.StepReboot, t0), at(rollout.Abort{}, t0)), now: t0,
			want: Decision{
				Actions: []Action{{Kind: ConfirmReboot, Machine: u1, Node: "m01", Step: rollout.StepReboot, Attempt: 1, Deadline: t0.Add(15 * time.Minute), InstructionID: id1, InstructionKind: rollout.KindReboot, Pool: "workers", Revision: 2, Why: "aborted"}},
				Waiting: []rollout.Block{{Reason: rollout.BlockAborting, Machine: u2, Message: "the rollout is being aborted"}},
			}},
		{name: "abort releases a cancelled drain", start: st, steps: seq(checked(), upTo(1, rollout.StepDrain, t0), at(rollout.Abort{}, t0), at(rollout.CancelStep{Machine: u1, Step: rollout.StepDrain, Attempt: 1}, t0)), now: t0,
			want: Decision{
				Commands: []rollout.Command{rollout.StartStep{Machine: u1, Step: rollout.StepUncordon, Attempt: 1}},
				Waiting:  []rollout.Block{{Reason: rollout.BlockAborting, Machine: u2, Message: "the rollout is being aborted"}},
			}},
		{name: "a rebooted machine finishes during an abort", start: st, steps: seq(checked(), upTo(1, rollout.StepWaitBoot, t0), at(rollout.Abort{}, t0)), now: t0,
			want: Decision{
				Actions: []Action{{Kind: WaitBoot, Machine: u1, Node: "m01", Step: rollout.StepWaitBoot, Attempt: 1, Deadline: t0.Add(2 * time.Hour), Pool: "workers", Revision: 2}},
				Waiting: []rollout.Block{{Reason: rollout.BlockAborting, Machine: u2, Message: "the rollout is being aborted"}},
				Wake:    t0.Add(2 * time.Hour),
			}},
		{name: "the last machine completes (Succeeded follows in the same append)", start: startCmd("r1", machines(1), "1"), steps: seq(checked(), upTo(1, rollout.StepUncordon, t0), at(rollout.SucceedStep{Machine: u1, Step: rollout.StepUncordon, Attempt: 1}, t0)), now: t0,
			want: Decision{Commands: []rollout.Command{rollout.CompleteMachine{Machine: u1}}}},
		{name: "a failed rollout waits for a person", start: st, steps: seq(checked(), upTo(1, rollout.StepCordon, t0), at(rollout.FailStep{Machine: u1, Step: rollout.StepCordon, Attempt: 1, Reason: "x"}, t0)), now: t0,
			want: Decision{Waiting: []rollout.Block{{Reason: rollout.BlockHalted, Message: "the rollout failed (machine m01 failed at cordon: x; its node stays cordoned); retry or abort it"}}}},
		{name: "an aborted rollout is final", start: st, steps: seq(at(rollout.Abort{}, t0)), now: t0,
			want: Decision{Final: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := history(t, tc.start, tc.steps...)
			got := Next(s, tc.now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%#v\nwant\n%#v", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNextProposesFinishForACrashedPrefix(t *testing.T) {
	// The last machine's MachineDone landed, the Succeeded after it did
	// not (the process died between the two appends).
	s := history(t, startCmd("r1", machines(1), "1"), append([]func(rollout.State) (rollout.Command, time.Time){checked()}, upTo(1, rollout.StepUncordon, t0)...)...)
	s.Apply(rollout.StepSucceeded{Machine: uuidOf(1), Step: rollout.StepUncordon, Attempt: 1, At: t0})
	s.Apply(rollout.MachineDone{Machine: uuidOf(1), At: t0})
	d := Next(s, t0)
	if !reflect.DeepEqual(d.Commands, []rollout.Command{rollout.Finish{}}) {
		t.Fatalf("%+v", d)
	}
	evs, err := rollout.Decide(s, rollout.Finish{}, t0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("%v %v", evs, err)
	}
	if _, ok := evs[0].(rollout.Succeeded); !ok {
		t.Fatalf("%T", evs[0])
	}
}

func TestActionStrings(t *testing.T) {
	a := Action{Kind: IssueReboot, Machine: uuidOf(1), Node: "m01", Step: rollout.StepReboot, Attempt: 2, InstructionID: "ri-x"}
	if a.String() != "issue_reboot m01 (attempt 2) instruction ri-x" || !strings.Contains(a.Key(), "/reboot/2") {
		t.Errorf("%s %s", a, a.Key())
	}
}
