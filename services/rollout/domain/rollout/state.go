package rollout

import (
	"reflect"
	"slices"
	"time"
)

// MachineState is one machine's progress, folded from the events.
type MachineState struct {
	Machine
	Kind       InstructionKind `json:"kind"` // reboot, or reapply when it already runs the target
	Phase      Phase           `json:"phase"`
	Step       Step            `json:"step,omitempty"` // the current (or last) step
	StepStatus StepStatus      `json:"step_status,omitempty"`
	Attempt    int             `json:"attempt,omitempty"` // of the current step
	// StepStartedAt and Deadline belong to the current step.
	StepStartedAt time.Time `json:"step_started_at,omitzero"`
	Deadline      time.Time `json:"deadline,omitzero"`
	// InstructionID is the reboot instruction of the latest reboot step;
	// Instructions every one issued, oldest first (never reused).
	InstructionID string   `json:"instruction_id,omitempty"`
	Instructions  []string `json:"instructions,omitempty"`
	// Rebooted: a reboot step succeeded (the agent accepted, or skipped
	// because it already ran the target). From here on an abort does not
	// uncordon the machine before it is Ready again.
	Rebooted bool `json:"rebooted,omitempty"`
	// Ready: wait_ready succeeded.
	Ready bool `json:"ready,omitempty"`
	// NodeBootIDBefore is the boot id the node's kubelet reported when it
	// was cordoned. After the reboot the Node may still say Ready for the
	// node-monitor grace period, from the old boot; wait_ready waits for a
	// kubelet reporting another boot id (empty: a node that reports none,
	// such as kwok's, is taken at its Ready condition).
	NodeBootIDBefore string `json:"node_boot_id_before,omitempty"`
	// RejoinDeadline is when the node-ready timeout, which starts with
	// wait_boot, runs out; wait_ready shares it.
	RejoinDeadline time.Time `json:"rejoin_deadline,omitzero"`
	// Node is what the rollout knows about the node's cordon.
	Node    NodeState   `json:"node"`
	Failure *Failure    `json:"failure,omitempty"` // the latest failure
	Blocked *DrainBlock `json:"blocked,omitempty"` // the running drain's latest block
	// ReleaseAttempted: the abort already tried to uncordon it once.
	ReleaseAttempted bool `json:"release_attempted,omitempty"`
	// Remediations counts the extra reboots given to it after it never
	// came back; Remediating is set from one until the machine is done or
	// fails again.
	Remediations int       `json:"remediations,omitempty"`
	Remediating  bool      `json:"remediating,omitempty"`
	BegunAt      time.Time `json:"begun_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
}

// State is a rollout as folded from its events. The zero value is a
// rollout that does not exist.
type State struct {
	ID          string   `json:"id"`
	Pool        string   `json:"pool"`
	Cluster     string   `json:"cluster,omitempty"`
	Revision    uint64   `json:"revision"`
	Hash        string   `json:"hash,omitempty"`
	Rollback    bool     `json:"rollback,omitempty"`
	After       string   `json:"after,omitempty"`
	AfterStatus Status   `json:"after_status,omitempty"` // succeeded or aborted once resolved
	PoolSize    int      `json:"pool_size"`
	Strategy    Strategy `json:"strategy"`
	RequestedBy string   `json:"requested_by,omitempty"`
	// Provisioning: a machine's own first rollout (see Start).
	Provisioning bool        `json:"provisioning,omitempty"`
	StartedAt    time.Time   `json:"started_at"`
	Excluded     []Exclusion `json:"excluded,omitempty"`

	// Machines, in rollout order.
	Machines []MachineState `json:"machines"`
	index    map[string]int
	// tally is kept by Apply, so that the rules do not walk every machine
	// on every decision.
	tally tally

	Checks       []CheckResult `json:"checks,omitempty"`
	ChecksPassed bool          `json:"checks_passed,omitempty"`

	Paused      bool   `json:"paused,omitempty"`
	Aborting    bool   `json:"aborting,omitempty"`
	AbortedBy   string `json:"aborted_by,omitempty"`
	AbortReason string `json:"abort_reason,omitempty"`
	Retries     int    `json:"retries,omitempty"`

	// LastFinishedAt is when the latest machine finished: the pause
	// between machines runs from here.
	LastFinishedAt time.Time `json:"last_finished_at,omitzero"`

	// Outcome is set once the rollout finished (succeeded, failed,
	// aborted). Retry and Abort reopen a failed rollout.
	Outcome    Status    `json:"outcome,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitzero"`

	// Refused: it never started (StartRefused). It has no machines, its
	// outcome is failed with the reason, and nothing can change it: it is
	// not Active, and every command but a repeated RefuseStart is refused.
	Refused bool `json:"refused,omitempty"`
}

// Exists reports whether the rollout exists.
func (s *State) Exists() bool { return s.ID != "" }

// Status is the rollout's status.
func (s *State) Status() Status {
	switch {
	case s.Outcome != "":
		return s.Outcome
	case s.Paused:
		return StatusPaused
	case !s.Cleared():
		return StatusPending
	}
	return StatusRunning
}

// Active reports whether the rollout holds its machines: it exists and is
// neither succeeded nor aborted. A failed rollout still holds them (their
// nodes may be cordoned) until it is retried to success or aborted; one
// that was refused never held any.
func (s *State) Active() bool { return s.Exists() && !s.Over() }

// Over reports whether nothing can change the rollout any more: it
// succeeded, was aborted, or never started (Refused).
func (s *State) Over() bool { return s.Refused || s.Status().Final() }

// Cleared reports whether machines may move: the rollout it comes after
// succeeded (if any) and the sanity checks passed.
func (s *State) Cleared() bool {
	return (s.After == "" || s.AfterStatus == StatusSucceeded) && s.ChecksPassed
}

// Machine returns the machine with uuid.
func (s *State) Machine(uuid string) (*MachineState, bool) {
	if s.index == nil { // a State decoded from JSON has no index
		for i := range s.Machines {
			if s.Machines[i].UUID == uuid {
				return &s.Machines[i], true
			}
		}
		return nil, false
	}
	i, ok := s.index[uuid]
	if !ok || i >= len(s.Machines) {
		return nil, false
	}
	return &s.Machines[i], true
}

// Budget is maxUnavailable resolved against the pool size: a percentage
// rounds down, and the result is at least 1 and at most the pool size
// (values.IntOrPercent.Resolve).
func (s *State) Budget() int {
	return s.Strategy.MaxUnavailable.Resolve(max(s.PoolSize, len(s.Machines)))
}

// Out counts the machines that are out: begun and not yet done or
// released, failed ones included (their nodes stay cordoned).
func (s *State) Out() int {
	if t := &s.tally; t.kept {
		return t.count(PhaseActive) + t.count(PhaseFailed)
	}
	n := 0
	for i := range s.Machines {
		if s.Machines[i].Phase.Out() {
			n++
		}
	}
	return n
}

// Halted reports whether a failed machine stops new ones from beginning.
func (s *State) Halted() bool {
	if t := &s.tally; t.kept {
		return t.count(PhaseFailed) > 0
	}
	for i := range s.Machines {
		if s.Machines[i].Phase == PhaseFailed {
			return true
		}
	}
	return false
}

// Count returns how many machines are in phase p.
func (s *State) Count(p Phase) int {
	if t := &s.tally; t.kept {
		return t.count(p)
	}
	n := 0
	for i := range s.Machines {
		if s.Machines[i].Phase == p {
			n++
		}
	}
	return n
}

// Clone returns a deep copy.
func (s State) Clone() State {
	c := s
	c.Machines = slices.Clone(s.Machines)
	for i := range c.Machines {
		m := &c.Machines[i]
		m.Instructions = slices.Clone(m.Instructions)
		if m.Failure != nil {
			f := *m.Failure
			m.Failure = &f
		}
		if m.Blocked != nil {
			b := *m.Blocked
			m.Blocked = &b
		}
	}
	// index, Checks and Excluded are never mutated in place; the tally is
	// a value.
	return c
}

// steps returns the machine's steps: a machine without a node has nothing
// to cordon or drain.
func (m *MachineState) steps() []Step {
	if m.NoNode {
		return Steps[2:]
	}
	return Steps
}

// following returns the step after the current one ("" after the last).
func (m *MachineState) following() Step {
	steps := m.steps()
	if m.Step == "" {
		return steps[0]
	}
	i := slices.Index(steps, m.Step)
	if i < 0 || i+1 >= len(steps) {
		return ""
	}
	return steps[i+1]
}

// NextAttempt is the attempt number a start of step would have.
func (m *MachineState) NextAttempt(step Step) int {
	if step == m.Step {
		return m.Attempt + 1
	}
	return 1
}

// mayBeCordoned reports whether the rollout may have cordoned the node.
func (m *MachineState) mayBeCordoned() bool {
	return m.Node == NodeCordoned || m.Node == NodeMaybeCordoned
}

// Apply folds one event into the state (evolve). It is deterministic and
// total: unknown events, events for unknown machines, nil pointers and
// events that do not match the state (a duplicate, say) are ignored. It
// never reads the clock and keeps no reference to the event's slices.
func (s *State) Apply(event any) {
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		event = v.Elem().Interface()
	}
	switch e := event.(type) {
	case Started:
		if !s.Exists() && e.ID != "" {
			s.start(e)
		}
		return
	case StartRefused:
		if !s.Exists() && e.ID != "" {
			*s = State{
				ID: e.ID, Pool: e.Pool, Cluster: e.Cluster, Revision: e.Revision, RequestedBy: e.RequestedBy,
				StartedAt: e.At, Machines: []MachineState{}, Refused: true,
				Outcome: StatusFailed, Reason: e.Reason, FinishedAt: e.At,
			}
		}
		return
	}
	if !s.Exists() || s.Refused {
		return
	}
	switch e := event.(type) {
	case DependencyResolved:
		if e.Rollout == s.After && s.AfterStatus == "" {
			s.AfterStatus = e.Outcome
		}
	case ChecksRecorded:
		s.Checks = slices.Clone(e.Results)
		s.ChecksPassed = checksPassed(e.Results)
	case MachineBegun:
		if m, ok := s.Machine(e.Machine); ok && m.Phase == PhaseWaiting {
			s.setPhase(m, PhaseActive)
			m.BegunAt = e.At
		}
	case StepStarted:
		m, ok := s.Machine(e.Machine)
		if !ok || !m.Phase.Out() || m.StepStatus == StepStatusRunning || !e.Step.Valid() {
			return
		}
		s.setPhase(m, PhaseActive)
		m.Step, m.Attempt, m.StepStatus = e.Step, e.Attempt, StepStatusRunning
		m.StepStartedAt, m.Deadline, m.Blocked = e.At, e.Deadline, nil
		switch e.Step {
		case StepCordon:
			if m.Node != NodeCordoned {
				m.Node = NodeMaybeCordoned
			}
		case StepReboot:
			m.InstructionID = e.InstructionID
			m.Instructions = append(slices.Clone(m.Instructions), e.InstructionID)
		case StepWaitBoot:
			m.RejoinDeadline = e.Deadline
		}
		if e.Release {
			m.ReleaseAttempted = true
		}
	case StepSucceeded:
		m := s.running(e.Machine, e.Step, e.Attempt)
		if m == nil {
			return
		}
		m.StepStatus, m.Blocked = StepStatusSucceeded, nil
		switch e.Step {
		case StepCordon:
			m.Node = NodeCordoned
			m.NodeBootIDBefore = e.NodeBootID
		case StepReboot:
			m.Rebooted = true
		case StepWaitReady:
			m.Ready = true
		case StepUncordon:
			m.Node = NodeUncordoned
		}
	case StepFailed:
		m := s.running(e.Machine, e.Step, e.Attempt)
		if m == nil {
			return
		}
		s.setPhase(m, PhaseFailed)
		s.setRemediating(m, false)
		m.StepStatus = StepStatusFailed
		m.Failure = &Failure{Step: e.Step, Attempt: e.Attempt, Reason: e.Reason, TimedOut: e.TimedOut, At: e.At}
	case StepCancelled:
		if m := s.running(e.Machine, e.Step, e.Attempt); m != nil {
			m.StepStatus, m.Blocked = StepStatusCancelled, nil
		}
	case DrainBlocked:
		if m := s.running(e.Machine, StepDrain, e.Attempt); m != nil {
			b := e.Block
			m.Blocked = &b
		}
	case MachineDone:
		if m, ok := s.Machine(e.Machine); ok && m.Phase == PhaseActive {
			s.setPhase(m, PhaseDone)
			s.setRemediating(m, false)
			m.FinishedAt = e.At
			s.LastFinishedAt = e.At
		}
	case MachineReleased:
		if m, ok := s.Machine(e.Machine); ok && m.Phase.Out() {
			s.setPhase(m, PhaseReleased)
			m.FinishedAt = e.At
			s.LastFinishedAt = e.At
		}
	case Paused:
		s.Paused = true
	case Resumed:
		s.Paused = false
	case AbortRequested:
		if s.Outcome != StatusSucceeded && s.Outcome != StatusAborted {
			s.Aborting, s.Paused = true, false
			s.AbortedBy, s.AbortReason = e.By, e.Reason
			s.Outcome, s.Reason, s.FinishedAt = "", "", time.Time{}
		}
	case MachineRemediated:
		m, ok := s.Machine(e.Machine)
		if !ok || !s.remediable(m) {
			return
		}
		m.Remediations++
		s.setRemediating(m, true)
		s.setPhase(m, PhaseActive)
		// The reboot step starts again as its next attempt (a new
		// instruction id); the machine already runs or half-runs the
		// target, so the instruction is a reapply.
		m.Attempt = len(m.Instructions)
		m.Step, m.StepStatus, m.Kind = StepReboot, StepStatusFailed, KindReapply
		m.Ready = false
		if s.Outcome == StatusFailed {
			s.Outcome, s.Reason, s.FinishedAt = "", "", time.Time{}
		}
	case Retried:
		if s.Outcome != StatusSucceeded && s.Outcome != StatusAborted && !s.Aborting {
			s.Retries++
			s.Outcome, s.Reason, s.FinishedAt = "", "", time.Time{}
			if s.Checks != nil && !s.ChecksPassed {
				s.Checks = nil
			}
			for i := range s.Machines {
				if m := &s.Machines[i]; m.Phase == PhaseFailed {
					s.setPhase(m, PhaseActive) // StepStatus stays failed: the step starts again
				}
			}
		}
	case Succeeded:
		s.finish(StatusSucceeded, "", e.At)
	case Failed:
		s.finish(StatusFailed, e.Reason, e.At)
	case Aborted:
		s.finish(StatusAborted, "", e.At)
	}
}

func (s *State) start(e Started) {
	*s = State{
		ID: e.ID, Pool: e.Pool, Cluster: e.Cluster, Revision: e.Revision, Hash: e.Hash, Rollback: e.Rollback,
		After: e.After, PoolSize: e.PoolSize, Strategy: e.Strategy, RequestedBy: e.RequestedBy, StartedAt: e.At,
		Provisioning: e.Provisioning,
		Excluded:     slices.Clone(e.Excluded),
		Machines:     make([]MachineState, 0, len(e.Machines)),
		index:        make(map[string]int, len(e.Machines)),
	}
	s.Strategy.MaintenanceWindows = slices.Clone(e.Strategy.MaintenanceWindows)
	for _, m := range e.Machines {
		if _, dup := s.index[m.UUID]; dup {
			continue
		}
		kind := KindReboot
		if m.CurrentRevision != 0 && m.CurrentRevision == e.Revision {
			kind = KindReapply
		}
		node := NodeUntouched
		s.index[m.UUID] = len(s.Machines)
		s.Machines = append(s.Machines, MachineState{Machine: m, Kind: kind, Phase: PhaseWaiting, Node: node})
	}
	s.tally = newTally(s.Machines)
}

func (s *State) finish(outcome Status, reason string, at time.Time) {
	if s.Outcome == StatusSucceeded || s.Outcome == StatusAborted {
		return
	}
	s.Outcome, s.Reason, s.FinishedAt = outcome, reason, at
}

// running returns the machine if its current step is step at attempt and
// running.
func (s *State) running(uuid string, step Step, attempt int) *MachineState {
	m, ok := s.Machine(uuid)
	if !ok || m.Phase != PhaseActive || m.StepStatus != StepStatusRunning || m.Step != step || m.Attempt != attempt {
		return nil
	}
	return m
}

func checksPassed(rs []CheckResult) bool {
	for _, r := range rs {
		if !r.Passed {
			return false
		}
	}
	return true
}

// Report returns every machine's state, for the Failed and Aborted events
// and the Operation view.
func (s *State) Report() []MachineReport {
	out := make([]MachineReport, 0, len(s.Machines))
	for i := range s.Machines {
		out = append(out, s.Machines[i].Report())
	}
	return out
}

// Report returns the machine's state as the Failed and Aborted events and
// the Operation view report it.
func (m *MachineState) Report() MachineReport {
	r := MachineReport{UUID: m.UUID, Hostname: m.Hostname, Node: m.Node, Rebooted: m.Rebooted}
	switch m.Phase {
	case PhaseWaiting:
		r.Outcome = OutcomeNotStarted
	case PhaseDone:
		r.Outcome = OutcomeDone
	case PhaseReleased:
		r.Outcome = OutcomeReleased
	case PhaseFailed:
		r.Outcome = OutcomeFailed
		if f := m.Failure; f != nil {
			r.Step, r.Reason = f.Step, f.Reason
		}
	default:
		r.Outcome = OutcomeInProgress
		r.Step = m.Step
	}
	return r
}
