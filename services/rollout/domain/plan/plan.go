// Package plan is the rollout process manager's brain: a pure function
// from a rollout's folded state and the current instant to what to do now.
//
// The service layer calls Next on every event of the rollout and on a
// timer (at Decision.Wake, and as a safety net every so often). It
//
//  1. decides each of Decision.Commands on the rollout, in order, and
//     appends the events with optimistic concurrency; if one is refused
//     (the state moved on), it stops and calls Next again on the new state;
//  2. makes sure each of Decision.Actions is being carried out. Every
//     action belongs to a step that the log already records as started,
//     so its guard was written before it; every action is idempotent, so
//     carrying one out twice (after a crash, on two replicas) is harmless.
//     Each action ends by reporting its outcome as a command
//     (SucceedStep, FailStep, CancelStep, RecordDrainBlocked,
//     RecordChecks, ResolveDependency).
//
// Next is idempotent: the same state and instant give the same Decision,
// and it never proposes a second reboot for a reboot step that was
// started; the re-drive carries the instruction id recorded in the log.
package plan

import (
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// ActionKind names an external action.
type ActionKind string

const (
	// WaitForRollout: watch rollout Action.Rollout; when it succeeded or
	// was aborted, ResolveDependency. (A failed one may be retried: keep
	// waiting.)
	WaitForRollout ActionKind = "wait_for_rollout"
	// RunChecks: run the sanity checks and RecordChecks. Touches nothing.
	RunChecks ActionKind = "run_checks"
	// Cordon: set the machine's target revision in the registry, then
	// cordon the node (both idempotent); SucceedStep.
	Cordon ActionKind = "cordon"
	// Drain: evict the node's pods through the Eviction API (DaemonSet
	// pods ignored, GracePeriod if set), until Deadline; while a
	// PodDisruptionBudget refuses an eviction, RecordDrainBlocked.
	// SucceedStep when no evictable pod is left. Idempotent: a re-drive
	// drains again.
	Drain ActionKind = "drain"
	// IssueReboot: set the machine's target revision in the registry,
	// make sure a rollout.reboot_requested with InstructionID is on the
	// rollout's subject (append it if it is not: the boot service
	// deduplicates by id), then watch the instruction: accepted, done or
	// skipped → SucceedStep; failed, expired or superseded → withdraw it
	// and FailStep.
	IssueReboot ActionKind = "issue_reboot"
	// ConfirmReboot: the reboot step timed out or the rollout is being
	// aborted. Withdraw InstructionID (rollout.instruction_withdrawn), then
	// read its status from the boot service: if the agent had accepted it
	// (accepted, done, skipped) → SucceedStep, the machine is rebooting;
	// otherwise → CancelStep when aborting, FailStep (timed out) when not.
	ConfirmReboot ActionKind = "confirm_reboot"
	// WaitBoot: wait until the agent reports that it booted Revision
	// (registry machine.revision_booted, or the instruction done);
	// SucceedStep. Coming back with another revision → FailStep.
	WaitBoot ActionKind = "wait_boot"
	// WaitReady: wait until the node is Ready; SucceedStep.
	WaitReady ActionKind = "wait_ready"
	// Uncordon: uncordon the node (idempotent; a node that is gone counts
	// as uncordoned); SucceedStep. With Release (an abort), afterwards
	// set the registry's target back to the machine's current revision.
	Uncordon ActionKind = "uncordon"
)

// Action is an external action for a step that is already recorded as
// started (or a check or a wait, which touch nothing).
type Action struct {
	Kind     ActionKind   `json:"kind"`
	Machine  string       `json:"machine,omitempty"` // UUID
	Node     string       `json:"node,omitempty"`    // hostname, the node name
	Step     rollout.Step `json:"step,omitempty"`
	Attempt  int          `json:"attempt,omitempty"`
	Deadline time.Time    `json:"deadline,omitzero"`

	// Reboot: the instruction recorded in the step's StepStarted.
	InstructionID   string                  `json:"instruction_id,omitempty"`
	InstructionKind rollout.InstructionKind `json:"instruction_kind,omitempty"`
	Pool            string                  `json:"pool,omitempty"`
	Revision        uint64                  `json:"revision,omitempty"`

	// Drain: nil means each pod's own terminationGracePeriodSeconds.
	GracePeriod *time.Duration `json:"grace_period,omitempty"`
	// Uncordon: the abort's release of a machine that never rebooted.
	Release bool `json:"release,omitempty"`
	// ConfirmReboot: "timed out" or "aborted".
	Why string `json:"why,omitempty"`
	// WaitForRollout: the rollout this one comes after.
	Rollout string `json:"rollout,omitempty"`
}

// Key identifies the action's piece of work: the service runs at most one
// executor per key, so that re-driving an action that is already being
// carried out does nothing.
func (a Action) Key() string {
	return fmt.Sprintf("%s/%s/%s/%d", a.Kind, a.Machine, a.Step, a.Attempt)
}

func (a Action) String() string {
	switch a.Kind {
	case WaitForRollout:
		return "wait for rollout " + a.Rollout
	case RunChecks:
		return "run sanity checks"
	}
	s := fmt.Sprintf("%s %s (attempt %d)", a.Kind, a.Node, a.Attempt)
	if a.InstructionID != "" {
		s += " instruction " + a.InstructionID
	}
	return s
}

// Decision is what to do now.
type Decision struct {
	// Commands to decide on the rollout and append, in order; stop at the
	// first refusal and plan again.
	Commands []rollout.Command
	// Actions to carry out (or to keep carrying out). All idempotent.
	Actions []Action
	// Waiting says why machines or steps do not move: for the Operation's
	// conditions and the log, never for control flow.
	Waiting []rollout.Block
	// Wake is when to plan again if no event comes first: the earliest
	// step deadline, the end of the pause between machines, the opening
	// of the next maintenance window (at most an hour ahead). Zero:
	// nothing is due by time.
	Wake time.Time
	// Final: the rollout succeeded or was aborted; nothing will ever be
	// proposed again.
	Final bool
}

// Next says what to do with rollout s at instant now.
func Next(s rollout.State, now time.Time) Decision {
	var d Decision
	if !s.Exists() {
		return d
	}
	if s.Status().Final() {
		d.Final = true
		return d
	}
	if outcome, _ := s.Finishing(); outcome != "" {
		d.Commands = []rollout.Command{rollout.Finish{}}
		return d
	}
	if s.Outcome == rollout.StatusFailed {
		// A machine that never came back may get one more reboot, which
		// reopens the rollout.
		for _, u := range s.RemediationCandidates() {
			d.Commands = append(d.Commands, rollout.Remediate{Machine: u})
		}
		if len(d.Commands) > 0 {
			return d
		}
		d.Waiting = append(d.Waiting, rollout.Block{Reason: rollout.BlockHalted, Message: "the rollout failed (" + s.Reason + "); retry or abort it"})
		return d
	}

	// Before any machine moves: the rollout it comes after, then the
	// sanity checks.
	// sanity checks (not while paused: they must be fresh when machines
	// move).
	if !s.Aborting {
		switch {
		case s.After != "" && s.AfterStatus == "":
			d.Actions = append(d.Actions, Action{Kind: WaitForRollout, Rollout: s.After})
		case (s.After == "" || s.AfterStatus == rollout.StatusSucceeded) && s.Checks == nil && !s.Paused:
			d.Actions = append(d.Actions, Action{Kind: RunChecks})
		}
	}

	// Machines that have begun.
	settling := false // a command that changes what may begin
	for _, u := range s.RemediationCandidates() {
		d.Commands = append(d.Commands, rollout.Remediate{Machine: u})
		settling = true
	}
	// Only machines that have begun and are not settled can be out: the
	// plan walks them, not the whole pool.
	lo, hi := s.Live()
	for i := lo; i < hi; i++ {
		m := &s.Machines[i]
		if !m.Phase.Out() {
			continue
		}
		if m.StepStatus == rollout.StepStatusRunning && m.Phase == rollout.PhaseActive {
			settling = d.running(&s, m, now) || settling
			continue
		}
		mv := s.MoveFor(m)
		switch {
		case mv.Finish != "":
			d.Commands = append(d.Commands, rollout.CompleteMachine{Machine: m.UUID})
			settling = true
		case mv.Start != "":
			if blk := s.StepBlock(m, mv.Start, now); blk != nil {
				d.Waiting = append(d.Waiting, *blk)
				d.wake(s.NextWindowOpen(now))
				continue
			}
			c := rollout.StartStep{Machine: m.UUID, Step: mv.Start, Attempt: mv.Attempt}
			if mv.Start == rollout.StepReboot {
				c.InstructionID = rollout.InstructionID(s.ID, m.UUID, mv.Attempt)
			}
			d.Commands = append(d.Commands, c)
		}
	}

	// New machines, unless a command above changes what may begin (a
	// failure halts, a finished machine frees a slot and starts the
	// pause): then the next plan, on the new state, decides.
	if !settling {
		uuids, blk := s.BeginCandidates(now)
		for _, u := range uuids {
			d.Commands = append(d.Commands, rollout.BeginMachine{Machine: u})
		}
		if blk != nil && blk.Reason != rollout.BlockFinished {
			d.Waiting = append(d.Waiting, *blk)
			switch {
			case blk.Reason == rollout.BlockWindow:
				// At most an hour ahead (see NextWindowOpen); Until is
				// the opening people are shown.
				d.wake(s.NextWindowOpen(now))
			case !blk.Until.IsZero():
				d.wake(blk.Until)
			}
		}
	}
	return d
}

// running plans a running step: re-drive it, time it out, or stop it for
// an abort. It reports whether it proposed a failure.
func (d *Decision) running(s *rollout.State, m *rollout.MachineState, now time.Time) bool {
	a := Action{Machine: m.UUID, Node: m.Hostname, Step: m.Step, Attempt: m.Attempt, Deadline: m.Deadline}
	expired := !now.Before(m.Deadline)
	switch {
	case m.Step == rollout.StepReboot && (s.Aborting || expired):
		// Only the boot service knows whether the agent accepted the
		// instruction: withdraw it and ask.
		a.Kind, a.InstructionID, a.InstructionKind, a.Pool, a.Revision = ConfirmReboot, m.InstructionID, m.Kind, s.Pool, s.Revision
		a.Why = "timed out"
		if s.Aborting {
			a.Why = "aborted"
		}
		d.Actions = append(d.Actions, a)
		return false
	case s.Aborting && (m.Step == rollout.StepCordon || m.Step == rollout.StepDrain):
		d.Commands = append(d.Commands, rollout.CancelStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt, Reason: "the rollout is being aborted"})
		return false
	case expired:
		d.Commands = append(d.Commands, rollout.FailStep{Machine: m.UUID, Step: m.Step, Attempt: m.Attempt, TimedOut: true, Reason: timeoutReason(m, now)})
		return true
	}
	switch m.Step {
	case rollout.StepCordon:
		a.Kind = Cordon
	case rollout.StepDrain:
		a.Kind = Drain
		if g := s.Strategy.DrainGracePeriod; g != nil {
			gp := g.Std()
			a.GracePeriod = &gp
		}
	case rollout.StepReboot:
		a.Kind, a.InstructionID, a.InstructionKind, a.Pool, a.Revision = IssueReboot, m.InstructionID, m.Kind, s.Pool, s.Revision
	case rollout.StepWaitBoot:
		a.Kind, a.Pool, a.Revision = WaitBoot, s.Pool, s.Revision
	case rollout.StepWaitReady:
		a.Kind = WaitReady
	case rollout.StepUncordon:
		a.Kind = Uncordon
		a.Release = m.ReleaseAttempted && !(m.Rebooted && m.Ready)
	}
	d.Actions = append(d.Actions, a)
	d.wake(m.Deadline)
	return false
}

// timeoutReason says which step timed out and, for a drain a budget
// blocked, how long the drain waited: from the step's start to now (the
// block's own WaitedFor is as of its last report, written at most every
// DrainBlockedEvery, so it may be the first moments of the drain).
func timeoutReason(m *rollout.MachineState, now time.Time) string {
	r := fmt.Sprintf("%s timed out after %s", m.Step, m.Deadline.Sub(m.StepStartedAt))
	if b := m.Blocked; m.Step == rollout.StepDrain && b != nil {
		waited := now.Sub(m.StepStartedAt)
		if waited >= time.Second {
			waited = waited.Round(time.Second)
		}
		r += fmt.Sprintf("; pod %s was blocked by PodDisruptionBudget %s (waited %s)", b.Pod, b.Budget, waited)
	}
	return r
}

func (d *Decision) wake(t time.Time) {
	if !t.IsZero() && (d.Wake.IsZero() || t.Before(d.Wake)) {
		d.Wake = t
	}
}
