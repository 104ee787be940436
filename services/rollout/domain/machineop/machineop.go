// Package machineop is the domain of one-machine operations: entering and
// leaving maintenance, leaving a pool, and a graceful deletion. Each is an
// Operation of its own (aggregate type "operation") that walks a short
// list of steps on one machine's node through the same cordon and drain
// path as a rollout, then reports to the registry. It is pure: no I/O, no
// clock.
//
// Every step is idempotent (cordon, drain, uncordon, deleting a node and
// the registry's completion commands all are), so a driver that crashes
// anywhere re-drives the step the log shows as current; step_started is
// the write-ahead record of each.
package machineop

import (
	"fmt"
	"reflect"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// AggregateType is the aggregate type of these operations.
const AggregateType = "operation"

// Kind is what an operation does.
type Kind string

const (
	KindMaintenanceEnter Kind = "maintenance_enter" // cordon, drain, complete_maintenance_entry
	KindMaintenanceExit  Kind = "maintenance_exit"  // uncordon
	KindUnassign         Kind = "unassign"          // cordon, drain, delete_node, complete_unassign
	KindDeletion         Kind = "deletion"          // cordon, drain, complete_deletion_preparation, delete_node, complete_deletion
	KindDeletionFinish   Kind = "deletion_finish"   // delete_node, complete_deletion (unsafe policy)
	KindDeletionAbort    Kind = "deletion_abort"    // uncordon, complete_deletion_abort
	// The registry already let the machine go (force-unassign, forced
	// deletion): only the Node is left to remove, best effort.
	KindForceUnassignCleanup  Kind = "force_unassign_cleanup"  // delete_node
	KindForcedDeletionCleanup Kind = "forced_deletion_cleanup" // delete_node
)

// BestEffort reports whether a failure of the operation leaves the
// registry alone: the machine moved on already, the operation only tidies
// the cluster, and its log says what is left to do by hand.
func (k Kind) BestEffort() bool {
	return k == KindForceUnassignCleanup || k == KindForcedDeletionCleanup
}

// Step is one step of an operation.
type Step string

const (
	StepCordon     Step = "cordon"
	StepDrain      Step = "drain"
	StepUncordon   Step = "uncordon"
	StepDeleteNode Step = "delete_node"
	StepComplete   Step = "complete" // the registry command that ends the machine's transition
	// StepPrepared is a deletion's report that its drain finished
	// (complete_deletion_preparation); the deletion goes on.
	StepPrepared Step = "prepared"
)

// StepsOf lists the steps of a kind; a machine without a node skips the
// node steps.
func StepsOf(k Kind, hasNode bool) []Step {
	var steps []Step
	switch k {
	case KindMaintenanceEnter:
		steps = []Step{StepCordon, StepDrain, StepComplete}
	case KindUnassign:
		// The Node follows the machine: a machine that left its pool is
		// no longer a node of the pool's cluster (as Cluster API deletes
		// the Node of a deleted Machine).
		steps = []Step{StepCordon, StepDrain, StepDeleteNode, StepComplete}
	case KindForceUnassignCleanup, KindForcedDeletionCleanup:
		steps = []Step{StepDeleteNode}
	case KindMaintenanceExit:
		steps = []Step{StepUncordon}
	case KindDeletion:
		steps = []Step{StepCordon, StepDrain, StepPrepared, StepDeleteNode, StepComplete}
	case KindDeletionFinish:
		steps = []Step{StepDeleteNode, StepComplete}
	case KindDeletionAbort:
		steps = []Step{StepUncordon, StepComplete}
	default:
		return nil
	}
	if hasNode {
		return steps
	}
	var out []Step
	for _, s := range steps {
		if s != StepCordon && s != StepDrain && s != StepUncordon && s != StepDeleteNode {
			out = append(out, s)
		}
	}
	return out
}

// Timeout is how long a step may run before the operation fails.
func Timeout(s Step, drainTimeout time.Duration) time.Duration {
	if s == StepDrain {
		return drainTimeout
	}
	return 5 * time.Minute
}

// Status of an operation.
type Status string

const (
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Final reports whether the operation is over.
func (s Status) Final() bool { return s != StatusRunning && s != "" }

// --- events, on events.<org>.operation.<id> ---

// Started: a registry event asked for the operation.
type Started struct {
	ID           string         `json:"id"`
	Kind         Kind           `json:"kind"`
	Machine      string         `json:"machine"` // UUID
	Node         string         `json:"node,omitempty"`
	Pool         string         `json:"pool,omitempty"`
	Cluster      string         `json:"cluster,omitempty"`
	Steps        []Step         `json:"steps"`
	DrainTimeout time.Duration  `json:"drain_timeout"`
	GracePeriod  *time.Duration `json:"grace_period,omitempty"`
	Cause        string         `json:"cause"` // the registry event that asked for it
	At           time.Time      `json:"at"`
}

// StepStarted is written before the step's action.
type StepStarted struct {
	Step     Step      `json:"step"`
	Deadline time.Time `json:"deadline"`
	At       time.Time `json:"at"`
}

// StepSucceeded: the step took effect.
type StepSucceeded struct {
	Step    Step      `json:"step"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// DrainBlocked: a PodDisruptionBudget refuses an eviction.
type DrainBlocked struct {
	Pod       string        `json:"pod"`
	Budget    string        `json:"budget"`
	WaitedFor time.Duration `json:"waited_for"`
	Message   string        `json:"message,omitempty"`
	At        time.Time     `json:"at"`
}

// Failed: a step failed or timed out; the node stays as it is (cordoned
// after a cordon), and the registry is told.
type Failed struct {
	Step     Step      `json:"step"`
	Reason   string    `json:"reason"`
	TimedOut bool      `json:"timed_out,omitempty"`
	At       time.Time `json:"at"`
}

// Succeeded: every step is done.
type Succeeded struct {
	At time.Time `json:"at"`
}

// Cancelled: the registry moved on (a deletion was aborted); the operation
// stops where it is.
type Cancelled struct {
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

func (Started) EventType() string       { return "operation.started" }
func (StepStarted) EventType() string   { return "operation.step_started" }
func (StepSucceeded) EventType() string { return "operation.step_succeeded" }
func (DrainBlocked) EventType() string  { return "operation.drain_blocked" }
func (Failed) EventType() string        { return "operation.failed" }
func (Succeeded) EventType() string     { return "operation.succeeded" }
func (Cancelled) EventType() string     { return "operation.cancelled" }

// EventTypes lists a zero value of every event, for registration.
func EventTypes() []any {
	return []any{Started{}, StepStarted{}, StepSucceeded{}, DrainBlocked{}, Failed{}, Succeeded{}, Cancelled{}}
}

// Entry is one line of the operation's log.
type Entry struct {
	At      time.Time `json:"at"`
	Step    Step      `json:"step,omitempty"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
}

// State is an operation folded from its events.
type State struct {
	Started
	Status     Status        `json:"status"`
	Current    int           `json:"current"` // index of the current step
	Running    bool          `json:"running"` // the current step was started
	Deadline   time.Time     `json:"deadline,omitzero"`
	StepAt     time.Time     `json:"step_at,omitzero"`
	Reason     string        `json:"reason,omitempty"`
	Blocked    *DrainBlocked `json:"blocked,omitempty"`
	UpdatedAt  time.Time     `json:"updated_at"`
	FinishedAt time.Time     `json:"finished_at,omitzero"`
	Log        []Entry       `json:"log"`
}

// Exists reports whether the operation was started.
func (s *State) Exists() bool { return s.ID != "" }

// Step is the current step ("" when none is left).
func (s *State) Step() Step {
	if s.Current < len(s.Steps) {
		return s.Steps[s.Current]
	}
	return ""
}

// Apply folds one event; unknown and out-of-place events are ignored.
func (s *State) Apply(event any) {
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		event = v.Elem().Interface()
	}
	if e, ok := event.(Started); ok {
		if !s.Exists() {
			s.Started, s.Status, s.UpdatedAt = e, StatusRunning, e.At
			s.log(e.At, "", "started", fmt.Sprintf("%s of %s (%s): steps %v; cause %s", e.Kind, e.Node, e.Machine, e.Steps, e.Cause))
		}
		return
	}
	if !s.Exists() || s.Status.Final() {
		return
	}
	switch e := event.(type) {
	case StepStarted:
		if e.Step == s.Step() && !s.Running {
			s.Running, s.Deadline, s.StepAt, s.UpdatedAt = true, e.Deadline, e.At, e.At
			s.log(e.At, e.Step, "started", "deadline "+e.Deadline.UTC().Format(time.RFC3339))
		}
	case StepSucceeded:
		if e.Step == s.Step() && s.Running {
			s.Current++
			s.Running, s.Blocked, s.UpdatedAt = false, nil, e.At
			s.log(e.At, e.Step, "succeeded", e.Message)
		}
	case DrainBlocked:
		if s.Step() == StepDrain && s.Running {
			b := e
			s.Blocked, s.UpdatedAt = &b, e.At
			s.log(e.At, StepDrain, "blocked", fmt.Sprintf("pod %s cannot be evicted: PodDisruptionBudget %s refuses it; waited %s so far", e.Pod, e.Budget, e.WaitedFor.Round(time.Second)))
		}
	case Failed:
		s.Status, s.Reason, s.UpdatedAt, s.FinishedAt = StatusFailed, e.Reason, e.At, e.At
		outcome := "failed"
		if e.TimedOut {
			outcome = "timed_out"
		}
		s.log(e.At, e.Step, outcome, e.Reason)
	case Succeeded:
		if s.Step() == "" {
			s.Status, s.UpdatedAt, s.FinishedAt = StatusSucceeded, e.At, e.At
			s.log(e.At, "", "succeeded", "")
		}
	case Cancelled:
		s.Status, s.Reason, s.UpdatedAt, s.FinishedAt = StatusCancelled, e.Reason, e.At, e.At
		s.log(e.At, s.Step(), "cancelled", e.Reason)
	}
}

func (s *State) log(at time.Time, step Step, outcome, msg string) {
	s.Log = append(s.Log, Entry{At: at, Step: step, Outcome: outcome, Message: msg})
}

// Next is what the driver does now: the events to append (a step to
// start, a timeout, the finish), and whether the current step's action
// must run.
func Next(s State, now time.Time) (evs []any, act bool) {
	if !s.Exists() || s.Status.Final() {
		return nil, false
	}
	step := s.Step()
	switch {
	case step == "":
		return []any{Succeeded{At: now}}, false
	case !s.Running:
		return []any{StepStarted{Step: step, Deadline: now.Add(Timeout(step, s.DrainTimeout)), At: now}}, false
	case !now.Before(s.Deadline):
		reason := fmt.Sprintf("%s timed out after %s", step, s.Deadline.Sub(s.StepAt).Round(time.Second))
		if b := s.Blocked; b != nil && step == StepDrain {
			reason += fmt.Sprintf("; pod %s was blocked by PodDisruptionBudget %s", b.Pod, b.Budget)
		}
		switch {
		case s.Kind.BestEffort():
			reason += fmt.Sprintf("; node %s is left in cluster %s: delete it by hand (kubectl delete node %s)", s.Node, s.Cluster, s.Node)
		case step != StepUncordon && step != StepDeleteNode:
			reason += "; the node stays cordoned"
		}
		return []any{Failed{Step: step, Reason: reason, TimedOut: true, At: now}}, false
	}
	return nil, true
}

// Validate checks a Started before it is appended.
func (e Started) Validate() error {
	var f errs.Fields
	if e.ID == "" {
		f.Add("id", "is required")
	}
	if StepsOf(e.Kind, true) == nil {
		f.Add("kind", "unknown operation kind %q", e.Kind)
	}
	if e.Machine == "" {
		f.Add("machine", "is required")
	}
	if e.DrainTimeout <= 0 {
		f.Add("drain_timeout", "must be positive")
	}
	return f.Err()
}
