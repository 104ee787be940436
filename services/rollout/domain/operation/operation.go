// Package operation is the Operation view of a rollout: what a user
// watches. Its status, its progress (n of m machines), each machine's
// state and a log of every step with its time and outcome, all derived
// from the rollout's events. It is pure: feed it the events of one
// rollout in order (Apply, or Project for a whole list).
package operation

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// Kind is the kind of operation this package shows.
const Kind = "rollout"

// Log outcomes.
const (
	LogStarted        = "started"
	LogRefused        = "refused" // the rollout never started
	LogExcluded       = "excluded"
	LogDependency     = "dependency"
	LogCheckPassed    = "check_passed"
	LogCheckFailed    = "check_failed"
	LogBegun          = "begun"
	LogSucceeded      = "succeeded"
	LogFailed         = "failed"
	LogTimedOut       = "timed_out"
	LogCancelled      = "cancelled"
	LogBlocked        = "blocked"
	LogDone           = "done"
	LogReleased       = "released"
	LogPaused         = "paused"
	LogResumed        = "resumed"
	LogAbortRequested = "abort_requested"
	LogRetried        = "retried"
	LogRemediated     = "remediated"
	LogAborted        = "aborted"
	LogFinalState     = "final_state" // one per machine when the rollout fails or is aborted
)

// Entry is one line of the operation log.
type Entry struct {
	At      time.Time    `json:"at"`
	Machine string       `json:"machine,omitempty"` // UUID; empty for the rollout itself
	Node    string       `json:"node,omitempty"`    // hostname
	Step    rollout.Step `json:"step,omitempty"`
	Outcome string       `json:"outcome"`
	Message string       `json:"message,omitempty"`
}

func (e Entry) String() string {
	var b strings.Builder
	b.WriteString(e.At.UTC().Format(time.RFC3339))
	if e.Node != "" {
		b.WriteString(" " + e.Node)
	}
	if e.Step != "" {
		b.WriteString(" " + string(e.Step))
	}
	b.WriteString(" " + e.Outcome)
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Progress counts machines: Done of Total is the "n of m".
type Progress struct {
	Done       int `json:"done"`
	Total      int `json:"total"`
	InProgress int `json:"in_progress"`
	Failed     int `json:"failed"`
	Released   int `json:"released"`
	NotStarted int `json:"not_started"`
}

func (p Progress) String() string { return fmt.Sprintf("%d of %d", p.Done, p.Total) }

// Machine is one machine's row.
type Machine struct {
	rollout.MachineReport
	Phase      rollout.Phase       `json:"phase"`
	StepStatus rollout.StepStatus  `json:"step_status,omitempty"`
	Attempt    int                 `json:"attempt,omitempty"`
	Deadline   time.Time           `json:"deadline,omitzero"`
	Blocked    *rollout.DrainBlock `json:"blocked,omitempty"`
}

// View is the Operation of one rollout.
type View struct {
	ID       string         `json:"id"`
	Kind     string         `json:"kind"`
	Pool     string         `json:"pool"`
	Revision uint64         `json:"revision"`
	Rollback bool           `json:"rollback,omitempty"`
	After    string         `json:"after,omitempty"`
	Status   rollout.Status `json:"status"`
	Aborting bool           `json:"aborting,omitempty"`
	// Reason: why it failed. Refused: it never started (Reason says
	// why); it is failed, and nothing can change it.
	Reason     string                `json:"reason,omitempty"`
	Refused    bool                  `json:"refused,omitempty"`
	Progress   Progress              `json:"progress"`
	Machines   []Machine             `json:"machines"`
	Excluded   []rollout.Exclusion   `json:"excluded,omitempty"`
	Checks     []rollout.CheckResult `json:"checks,omitempty"`
	StartedAt  time.Time             `json:"started_at"`
	FinishedAt time.Time             `json:"finished_at,omitzero"`
	// Conditions say why it waits, if it does (see Explain); with
	// LastProgressAt and EstimatedDoneAt they are filled when it is read.
	Conditions      []Condition `json:"conditions,omitempty"`
	LastProgressAt  time.Time   `json:"last_progress_at,omitzero"`
	EstimatedDoneAt time.Time   `json:"estimated_done_at,omitzero"`
	Log             []Entry     `json:"log"`

	state rollout.State
}

// Origin is who started the rollout, on which cluster, with which
// strategy (its own copy), without copying the whole state.
func (v *View) Origin() (cluster string, strategy rollout.Strategy, requestedBy string) {
	st := v.state.Strategy
	st.MaintenanceWindows = slices.Clone(st.MaintenanceWindows)
	return v.state.Cluster, st, v.state.RequestedBy
}

// Detach lets go of the state the view folded: a copy of the view handed
// out of a model that keeps applying events must not share it (State()
// is then empty; the model's snapshots carry the state).
func (v *View) Detach() { v.state = rollout.State{} }

// Explain fills the conditions, the last progress and the estimate as of
// now, given what the planner says the rollout waits for now
// (plan.Next(v.State(), now).Waiting).
func (v *View) Explain(waiting func(rollout.State) []rollout.Block, now time.Time) {
	v.Conditions, v.LastProgressAt, v.EstimatedDoneAt = Explain(v.state, waiting(v.state), now)
}

// Project builds the view from a rollout's events.
func Project(events []any) View {
	var v View
	for _, e := range events {
		v.Apply(e)
	}
	return v
}

// Over reports whether nothing can change the rollout any more: it
// succeeded, was aborted, or was refused.
func (v *View) Over() bool { return v.Refused || v.Status.Final() }

// State returns the rollout state the view folded.
func (v *View) State() rollout.State { return v.state.Clone() }

// Peek calls fn with the state the view folded, not a copy: fn must
// neither keep nor change it (a copy of 10,000 machines for every reader
// cost a 10,000-machine rollout an eighth of its CPU).
func (v *View) Peek(fn func(*rollout.State)) { fn(&v.state) }

// Apply folds one event: the state, then the log lines it makes.
func (v *View) Apply(event any) {
	if rv := reflect.ValueOf(event); rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return
		}
		event = rv.Elem().Interface()
	}
	existed := v.state.Exists()
	changed, all := v.state.Affects(event) // indexes, before the event may replace the machines
	v.state.Apply(event)
	if !v.state.Exists() {
		return
	}
	v.log(event, existed)
	v.refreshRollout()
	if all || !existed || len(v.Machines) != len(v.state.Machines) {
		v.refresh()
		return
	}
	// Only the rows of the machines the event changed: a rollout of
	// 10,000 machines does not rebuild them all for every event.
	for _, i := range changed {
		v.count(v.Machines[i], -1)
		v.Machines[i] = row(&v.state.Machines[i])
		v.count(v.Machines[i], 1)
	}
}

// refreshRollout copies the rollout's own fields from the state.
func (v *View) refreshRollout() {
	s := &v.state
	v.ID, v.Kind, v.Pool, v.Revision, v.Rollback, v.After = s.ID, Kind, s.Pool, s.Revision, s.Rollback, s.After
	v.Status, v.Aborting, v.Reason, v.Refused = s.Status(), s.Aborting && s.Outcome == "", s.Reason, s.Refused
	v.Excluded, v.Checks, v.StartedAt, v.FinishedAt = s.Excluded, s.Checks, s.StartedAt, s.FinishedAt
}

// refresh rebuilds every machine's row and the progress.
func (v *View) refresh() {
	s := &v.state
	v.refreshRollout()
	v.Progress = Progress{Total: len(s.Machines)}
	v.Machines = v.Machines[:0]
	for i := range s.Machines {
		r := row(&s.Machines[i])
		v.Machines = append(v.Machines, r)
		v.count(r, 1)
	}
}

// row is the view's row of machine m.
func row(m *rollout.MachineState) Machine {
	r := Machine{MachineReport: m.Report(), Phase: m.Phase, StepStatus: m.StepStatus, Attempt: m.Attempt}
	if m.StepStatus == rollout.StepStatusRunning {
		r.Deadline = m.Deadline
		if m.Blocked != nil {
			b := *m.Blocked
			r.Blocked = &b
		}
	}
	return r
}

// count adds (by +1) or takes away (by -1) a row from the progress.
func (v *View) count(r Machine, by int) {
	switch r.Outcome {
	case rollout.OutcomeDone:
		v.Progress.Done += by
	case rollout.OutcomeFailed:
		v.Progress.Failed += by
	case rollout.OutcomeReleased:
		v.Progress.Released += by
	case rollout.OutcomeNotStarted:
		v.Progress.NotStarted += by
	default:
		v.Progress.InProgress += by
	}
}

func (v *View) add(at time.Time, uuid string, step rollout.Step, outcome, format string, args ...any) {
	e := Entry{At: at, Machine: uuid, Step: step, Outcome: outcome, Message: fmt.Sprintf(format, args...)}
	if m, ok := v.state.Machine(uuid); ok {
		e.Node = m.Hostname
	}
	v.Log = append(v.Log, e)
}

func (v *View) log(event any, existed bool) {
	s := &v.state
	switch e := event.(type) {
	case rollout.Started:
		if existed {
			return
		}
		what := "rollout"
		if e.Rollback {
			what = "rollback"
		}
		msg := fmt.Sprintf("%s of pool %s to revision %d: %d machines, maxUnavailable %s (%d at a time)",
			what, e.Pool, e.Revision, len(e.Machines), s.Strategy.MaxUnavailable, s.Budget())
		if e.After != "" {
			msg += "; after rollout " + e.After + " succeeds"
		}
		if e.RequestedBy != "" {
			msg += "; requested by " + e.RequestedBy
		}
		v.add(e.At, "", "", LogStarted, "%s", msg)
		for _, x := range e.Excluded {
			v.Log = append(v.Log, Entry{At: e.At, Machine: x.UUID, Node: x.Hostname, Outcome: LogExcluded, Message: "left out and not touched: " + x.Reason})
		}
	case rollout.StartRefused:
		if existed {
			return
		}
		msg := fmt.Sprintf("pool %s, revision %d: %s; nothing was touched, apply again once that is fixed", e.Pool, e.Revision, e.Reason)
		if e.RequestedBy != "" {
			msg += "; requested by " + e.RequestedBy
		}
		v.add(e.At, "", "", LogRefused, "%s", msg)
	case rollout.DependencyResolved:
		if e.Outcome == rollout.StatusSucceeded {
			v.add(e.At, "", "", LogDependency, "rollout %s succeeded; this one goes on", e.Rollout)
		} else {
			v.add(e.At, "", "", LogDependency, "rollout %s, which this one comes after, was %s", e.Rollout, e.Outcome)
		}
	case rollout.ChecksRecorded:
		for _, c := range e.Results {
			name := c.Name
			if c.Machine != "" {
				if m, ok := s.Machine(c.Machine); ok {
					name += " (" + m.Hostname + ")"
				} else {
					name += " (" + c.Machine + ")"
				}
			}
			if c.Passed {
				v.add(e.At, "", "", LogCheckPassed, "%s%s", name, suffix(c.Reason))
			} else {
				v.add(e.At, "", "", LogCheckFailed, "%s: %s", name, c.Reason)
			}
		}
	case rollout.MachineBegun:
		v.add(e.At, e.Machine, "", LogBegun, "out of service from now on (%d of at most %d out)", s.Out(), s.Budget())
	case rollout.StepStarted:
		msg := fmt.Sprintf("attempt %d, deadline %s", e.Attempt, e.Deadline.UTC().Format(time.RFC3339))
		switch {
		case e.Step == rollout.StepReboot:
			msg += fmt.Sprintf("; %s instruction %s into revision %d", e.Kind, e.InstructionID, s.Revision)
		case e.Release:
			msg += "; the abort releases the node, which never rebooted"
		}
		v.add(e.At, e.Machine, e.Step, LogStarted, "%s", msg)
	case rollout.StepSucceeded:
		v.add(e.At, e.Machine, e.Step, LogSucceeded, "%s", e.Message)
	case rollout.StepFailed:
		outcome := LogFailed
		if e.TimedOut {
			outcome = LogTimedOut
		}
		v.add(e.At, e.Machine, e.Step, outcome, "%s%s", e.Reason, nodeNote(s, e.Machine))
	case rollout.StepCancelled:
		v.add(e.At, e.Machine, e.Step, LogCancelled, "%s", e.Reason)
	case rollout.DrainBlocked:
		b := e.Block
		v.add(b.At, e.Machine, rollout.StepDrain, LogBlocked, "pod %s cannot be evicted: PodDisruptionBudget %s refuses it; waited %s so far%s",
			b.Pod, b.Budget, b.WaitedFor, suffix(b.Message))
	case rollout.MachineRemediated:
		v.add(e.At, e.Machine, rollout.StepReboot, LogRemediated, "%s", e.Reason)
	case rollout.MachineDone:
		v.add(e.At, e.Machine, "", LogDone, "at revision %d, Ready and uncordoned", s.Revision)
	case rollout.MachineReleased:
		v.add(e.At, e.Machine, "", LogReleased, "uncordoned by the abort; it never rebooted and still runs its old revision")
	case rollout.Paused:
		v.add(e.At, "", "", LogPaused, "no new machine begins; machines already begun finish%s%s", by(e.By), suffix(e.Reason))
	case rollout.Resumed:
		v.add(e.At, "", "", LogResumed, "%s", strings.TrimPrefix(by(e.By)+suffix(e.Reason), "; "))
	case rollout.AbortRequested:
		v.add(e.At, "", "", LogAbortRequested, "machines that have not rebooted are uncordoned; machines that have finish their steps%s%s", by(e.By), suffix(e.Reason))
	case rollout.Retried:
		v.add(e.At, "", "", LogRetried, "failed machines resume at the step that failed%s%s", by(e.By), suffix(e.Reason))
	case rollout.Succeeded:
		v.add(e.At, "", "", LogSucceeded, "all %d machines at revision %d", len(s.Machines), s.Revision)
	case rollout.Failed:
		v.add(e.At, "", "", LogFailed, "%s", e.Reason)
		v.report(e.At, e.Machines)
	case rollout.Aborted:
		v.add(e.At, "", "", LogAborted, "the abort wound down")
		v.report(e.At, e.Machines)
	case rollout.MachinesReported:
		// The final states that did not fit in the Failed or Aborted
		// event that follows.
		v.report(e.At, e.Machines)
	}
}

// report logs every machine's final state: nothing is left cordoned
// without the log saying so.
func (v *View) report(at time.Time, rs []rollout.MachineReport) {
	for _, r := range rs {
		var msg string
		switch r.Outcome {
		case rollout.OutcomeNotStarted:
			msg = "not started; untouched"
		case rollout.OutcomeDone:
			msg = "done; Ready and uncordoned at the target revision"
		case rollout.OutcomeReleased:
			msg = "released; uncordoned, still at its old revision"
		case rollout.OutcomeFailed:
			msg = fmt.Sprintf("failed at %s: %s", r.Step, r.Reason)
		default:
			msg = string(r.Outcome)
		}
		switch r.Node {
		case rollout.NodeCordoned:
			msg += "; its node is LEFT CORDONED"
		case rollout.NodeMaybeCordoned:
			msg += "; its node MAY BE LEFT CORDONED (a cordon was under way)"
		}
		if r.Rebooted && r.Outcome != rollout.OutcomeDone {
			msg += "; it rebooted into the target revision"
		}
		v.Log = append(v.Log, Entry{At: at, Machine: r.UUID, Node: r.Hostname, Step: r.Step, Outcome: LogFinalState, Message: msg})
	}
}

func nodeNote(s *rollout.State, uuid string) string {
	m, ok := s.Machine(uuid)
	if !ok {
		return ""
	}
	switch m.Node {
	case rollout.NodeCordoned:
		return "; the node stays cordoned"
	case rollout.NodeMaybeCordoned:
		return "; the node may be cordoned and stays so"
	}
	return ""
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; " + s
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return "; by " + who
}
