package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// The rules in this file are shared by Decide (which refuses what breaks
// them) and the planner (which never proposes it).

// BlockReason says why nothing (more) moves.
type BlockReason string

const (
	BlockFinished     BlockReason = "finished"      // the rollout finished
	BlockAborting     BlockReason = "aborting"      // an abort winds the rollout down
	BlockPaused       BlockReason = "paused"        // paused by an operator
	BlockDependency   BlockReason = "dependency"    // the rollout it comes after has not succeeded
	BlockChecks       BlockReason = "checks"        // the sanity checks have not passed
	BlockHalted       BlockReason = "halted"        // a machine failed: Retry or Abort
	BlockControlPlane BlockReason = "control_plane" // one control-plane machine at a time, and workers after all of them
	BlockBudget       BlockReason = "budget"        // maxUnavailable machines are out
	BlockPause        BlockReason = "pause"         // the pause between machines runs
	BlockWindow       BlockReason = "window"        // outside every maintenance window
)

// Block is why a machine does not begin, or a step does not start, now.
type Block struct {
	Reason  BlockReason `json:"reason"`
	Machine string      `json:"machine,omitempty"` // the machine that waits
	Step    Step        `json:"step,omitempty"`    // the step that waits (windows)
	Until   time.Time   `json:"until,omitzero"`    // when it lifts by itself, if known
	Message string      `json:"message"`
}

func (b *Block) Error() string { return b.Message }

// InWindow reports whether now is inside one of the maintenance windows
// (always, with none).
func (s *State) InWindow(now time.Time) bool {
	return values.InMaintenanceWindow(s.Strategy.MaintenanceWindows, now)
}

// NextWindowOpen returns when a maintenance window next opens after now,
// but never more than an hour ahead: where a wall-clock start is
// ambiguous (the hour the clocks go back) the computed instant could be
// the later of two, and waking early only costs one more look. It returns
// the zero time when there are no windows.
func (s *State) NextWindowOpen(now time.Time) time.Time {
	next := s.WindowOpensAt(now)
	if limit := now.Add(time.Hour); next.IsZero() && len(s.Strategy.MaintenanceWindows) > 0 || next.After(limit) {
		return limit
	}
	return next
}

// WindowOpensAt returns when a maintenance window next opens after now
// (within a week), for people: the time a waiting rollout shows. It
// returns the zero time when there are no windows or none opens.
func (s *State) WindowOpensAt(now time.Time) time.Time {
	ws := s.Strategy.MaintenanceWindows
	if len(ws) == 0 {
		return time.Time{}
	}
	var next time.Time
	for _, w := range ws {
		loc, err := time.LoadLocation(w.TimeZone)
		if err != nil || w.TimeZone == "" || w.TimeZone == "Local" {
			continue
		}
		start, err := time.Parse("15:04", w.Start)
		if err != nil {
			continue
		}
		local := now.In(loc)
		for d := 0; d <= 7; d++ {
			day := time.Date(local.Year(), local.Month(), local.Day()+d, start.Hour(), start.Minute(), 0, 0, loc)
			if !day.After(now) || !slices.Contains(w.Days, weekdayNames[day.Weekday()]) {
				continue
			}
			if next.IsZero() || day.Before(next) {
				next = day
			}
			break
		}
	}
	return next
}

var weekdayNames = [...]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// BeginCandidates returns the machines that may begin now, in order, or
// why none may. It returns neither when no machine waits.
//
// A machine begins only if: the rollout is running (not finished,
// aborting, paused, waiting for the rollout it comes after or for its
// checks); no machine failed; it is the next in rollout order; fewer than
// maxUnavailable machines are out (one, for control-plane machines, and
// workers only once every control-plane machine is done); the pause since
// the last machine finished has passed; and now is inside a maintenance
// window.
func (s *State) BeginCandidates(now time.Time) ([]string, *Block) {
	first := s.firstWaiting()
	if first >= len(s.Machines) {
		return nil, nil
	}
	next := &s.Machines[first]
	blk := func(r BlockReason, until time.Time, format string, args ...any) *Block {
		return &Block{Reason: r, Machine: next.UUID, Until: until, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Outcome == StatusFailed:
		return nil, blk(BlockFinished, time.Time{}, "retry or abort it")
	case s.Outcome != "":
		return nil, blk(BlockFinished, time.Time{}, "it is finished")
	case s.Aborting:
		return nil, blk(BlockAborting, time.Time{}, "the rollout is being aborted")
	case s.Paused:
		return nil, blk(BlockPaused, time.Time{}, "the rollout is paused")
	case s.After != "" && s.AfterStatus != StatusSucceeded:
		return nil, blk(BlockDependency, time.Time{}, "waiting for rollout %s to succeed", s.After)
	case !s.ChecksPassed:
		return nil, blk(BlockChecks, time.Time{}, "the sanity checks have not passed")
	case s.Halted():
		return nil, blk(BlockHalted, time.Time{}, "%s; no new machine begins until a retry or an abort", s.failures())
	}
	out, budget := s.Out(), s.Budget()
	slots := budget - out
	if next.ControlPlane {
		for i := range s.Machines {
			if m := &s.Machines[i]; m.ControlPlane && m.Phase.Out() {
				return nil, blk(BlockControlPlane, time.Time{}, "control-plane machine %s is out; control-plane machines go one at a time", m.Hostname)
			}
		}
		slots = min(slots, 1)
	} else if t := &s.tally; !t.kept || t.controlPlaneNotDone() > 0 {
		// The walk only finds whom to name (or, without a tally, whether
		// any control-plane machine is not done).
		for i := range s.Machines {
			if m := &s.Machines[i]; m.ControlPlane && m.Phase != PhaseDone {
				return nil, blk(BlockControlPlane, time.Time{}, "workers begin once every control-plane machine is done; %s is %s", m.Hostname, m.Phase)
			}
		}
	}
	if slots <= 0 {
		return nil, blk(BlockBudget, time.Time{}, "%d of at most %d machines are out (maxUnavailable %s of %d)", out, budget, s.Strategy.MaxUnavailable, max(s.PoolSize, len(s.Machines)))
	}
	if p := s.Strategy.Pause.Std(); p > 0 && !s.LastFinishedAt.IsZero() && now.Before(s.LastFinishedAt.Add(p)) {
		until := s.LastFinishedAt.Add(p)
		return nil, blk(BlockPause, until, "pausing %s between machines, until %s", p, until.UTC().Format(time.RFC3339))
	}
	if !s.InWindow(now) {
		if opens := s.WindowOpensAt(now); !opens.IsZero() {
			return nil, blk(BlockWindow, opens, "outside every maintenance window; the next one opens at %s", opens.UTC().Format(time.RFC3339))
		}
		return nil, blk(BlockWindow, time.Time{}, "outside every maintenance window")
	}
	var uuids []string
	for i := first; i < len(s.Machines) && len(uuids) < slots; i++ {
		m := &s.Machines[i]
		if m.Phase != PhaseWaiting {
			continue
		}
		if m.ControlPlane != next.ControlPlane {
			break
		}
		uuids = append(uuids, m.UUID)
	}
	return uuids, nil
}

// Move is what a begun machine does next, by the state alone (the time
// matters only for windows and deadlines, which the caller checks).
type Move struct {
	Start   Step    // start this step (Attempt, Release) ...
	Attempt int     //
	Release bool    // the uncordon of an abort for a machine that never rebooted
	Finish  Outcome // ... or finish the machine: done or released
}

// MoveFor says what machine m does next. The zero Move means nothing: it
// waits (not begun, a step runs) or it is settled.
func (s *State) MoveFor(m *MachineState) Move {
	if s.Outcome != "" {
		return Move{}
	}
	release := func() Move {
		if m.Node == NodeCordoned || m.Node == NodeMaybeCordoned {
			return Move{Start: StepUncordon, Attempt: m.NextAttempt(StepUncordon), Release: true}
		}
		return Move{Finish: OutcomeReleased}
	}
	switch m.Phase {
	case PhaseActive:
		if m.StepStatus == StepStatusRunning {
			return Move{}
		}
		if s.Aborting && !m.Rebooted {
			if m.Step == StepUncordon && m.StepStatus == StepStatusSucceeded {
				return Move{Finish: OutcomeReleased}
			}
			return release()
		}
		switch m.StepStatus {
		case StepStatusFailed: // retried: the step that failed starts again
			return Move{Start: m.Step, Attempt: m.NextAttempt(m.Step)}
		case StepStatusCancelled: // only an abort cancels, and only before a reboot (handled above)
			return Move{}
		}
		next := m.following()
		if next == "" { // every step succeeded: rebooted, Ready, uncordoned
			return Move{Finish: OutcomeDone}
		}
		return Move{Start: next, Attempt: m.NextAttempt(next)}
	case PhaseFailed:
		if !s.Aborting || m.ReleaseAttempted {
			return Move{} // stays failed, and cordoned
		}
		if !m.Rebooted {
			return release()
		}
		if m.Ready && m.Failure != nil && m.Failure.Step == StepUncordon {
			// Back at the target and Ready; only its uncordon failed.
			return Move{Start: StepUncordon, Attempt: m.NextAttempt(StepUncordon), Release: true}
		}
		// It rebooted and did not come back Ready: left cordoned, reported.
	}
	return Move{}
}

// StepBlock says why a step that MoveFor proposes cannot start now: a
// disruptive step (cordon, drain, reboot) starts only inside a
// maintenance window. Steps that give capacity back never wait.
func (s *State) StepBlock(m *MachineState, step Step, now time.Time) *Block {
	if step.Disruptive() && !s.InWindow(now) {
		msg := fmt.Sprintf("%s of %s waits for a maintenance window", step, m.Hostname)
		opens := s.WindowOpensAt(now)
		if !opens.IsZero() {
			msg += "; the next one opens at " + opens.UTC().Format(time.RFC3339)
		}
		if m.mayBeCordoned() {
			msg += "; its node stays cordoned meanwhile"
		}
		return &Block{Reason: BlockWindow, Machine: m.UUID, Step: step, Until: opens, Message: msg}
	}
	return nil
}

// Deadline is when step, started now as attempt, times out. wait_boot and
// wait_ready share the node-ready timeout: it runs from the start of
// wait_boot until the node is Ready (a retry of wait_ready gets a fresh
// one). wait_ready always gets at least MinReadyWindow.
func (s *State) Deadline(m *MachineState, step Step, attempt int, now time.Time) time.Time {
	if step == StepWaitReady && attempt == 1 && !m.RejoinDeadline.IsZero() {
		return latest(m.RejoinDeadline, now.Add(MinReadyWindow))
	}
	return now.Add(s.Strategy.Timeout(step))
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Finishing says whether the rollout can finish now and how: nothing is
// in flight or left to release, and either every machine is done, or a
// check, the rollout it comes after, or a machine failed, or it is being
// aborted. It returns "" otherwise.
func (s *State) Finishing() (Status, string) {
	if !s.Exists() || s.Outcome != "" {
		return "", ""
	}
	switch t := &s.tally; {
	case t.kept && t.count(PhaseActive) > 0:
		return "", ""
	case t.kept && !s.Aborting:
		// Without an abort a machine that is not active has no move left
		// (MoveFor): nothing to walk.
	default:
		for i := range s.Machines {
			m := &s.Machines[i]
			if m.Phase == PhaseActive {
				return "", ""
			}
			if mv := s.MoveFor(m); mv.Start != "" || mv.Finish != "" {
				return "", ""
			}
		}
	}
	if s.Aborting {
		return StatusAborted, ""
	}
	if s.After != "" && s.AfterStatus == StatusAborted {
		return StatusFailed, fmt.Sprintf("rollout %s, which this one comes after, was aborted", s.After)
	}
	if s.Checks != nil && !s.ChecksPassed {
		var parts []string
		for _, c := range s.Checks {
			if !c.Passed {
				p := c.Name + ": " + c.Reason
				if c.Machine != "" {
					p = c.Name + " (" + c.Machine + "): " + c.Reason
				}
				parts = append(parts, p)
			}
		}
		return StatusFailed, "sanity checks failed, nothing was touched: " + strings.Join(parts, "; ")
	}
	if !s.Cleared() {
		return "", ""
	}
	if s.Halted() {
		return StatusFailed, s.failures()
	}
	if s.Count(PhaseDone) == len(s.Machines) {
		return StatusSucceeded, ""
	}
	return "", ""
}

// maxFailuresDescribed bounds the machines a rollout's failure reason
// names: the reason is one field of one event, and every failed machine's
// reason is in its own report anyway.
const maxFailuresDescribed = 20

// failures describes the failed machines, the first maxFailuresDescribed
// of them by name.
func (s *State) failures() string {
	var parts []string
	more := 0
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.Phase != PhaseFailed || m.Failure == nil {
			continue
		}
		if len(parts) == maxFailuresDescribed {
			more++
			continue
		}
		p := fmt.Sprintf("machine %s failed at %s: %s", m.Hostname, m.Failure.Step, m.Failure.Reason)
		if m.mayBeCordoned() {
			p += "; its node stays cordoned"
		}
		parts = append(parts, p)
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more machines failed (each machine's report says where and why)", more))
	}
	return strings.Join(parts, "; ")
}

// InstructionID is the reboot instruction id for attempt of a machine's
// reboot step in a rollout: deterministic, so that every process that
// plans the same state proposes the same id, and distinct for every
// attempt, so that a retry is a new instruction. It fits the boot
// service's format (1-128 of [A-Za-z0-9._:-]).
func InstructionID(rollout, machine string, attempt int) string {
	sum := sha256.Sum256([]byte(rollout + "\x00" + machine + "\x00reboot\x00" + strconv.Itoa(attempt)))
	return "ri-" + hex.EncodeToString(sum[:16])
}

// remediable reports whether machine m may be given one more reboot now:
// remediation is on, m booted but never came back (its wait_boot or
// wait_ready timed out), it was not remediated before, the rollout is not
// being aborted or finished, and fewer than RemediationMaxInFlight of its
// machines are being remediated.
func (s *State) remediable(m *MachineState) bool {
	max := s.Strategy.RemediationMaxInFlight
	if max <= 0 || s.Aborting || s.Outcome == StatusSucceeded || s.Outcome == StatusAborted {
		return false
	}
	f := m.Failure
	if m.Phase != PhaseFailed || f == nil || !f.TimedOut || (f.Step != StepWaitBoot && f.Step != StepWaitReady) ||
		m.Remediations >= MaxRemediations {
		return false
	}
	return s.remediating() < max
}

func (s *State) remediating() int {
	if s.tally.kept {
		return s.tally.remediating
	}
	n := 0
	for i := range s.Machines {
		if s.Machines[i].Remediating {
			n++
		}
	}
	return n
}

// RemediationCandidates lists the machines that may be remediated now, in
// rollout order, within the in-flight cap.
func (s *State) RemediationCandidates() []string {
	var out []string
	room := s.Strategy.RemediationMaxInFlight - s.remediating()
	if room <= 0 {
		return nil
	}
	lo, hi := s.Live() // a machine that may be remediated failed: it is out
	for i := lo; i < hi; i++ {
		if len(out) >= room {
			break
		}
		m := &s.Machines[i]
		if s.remediable(m) {
			out = append(out, m.UUID)
		}
	}
	return out
}
