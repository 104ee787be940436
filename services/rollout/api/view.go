package api

import (
	"fmt"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// The Operation view of a rollout as the API shows it. These are plain
// types of the contract: the rollout service translates its domain's
// view into them (services/rollout/ports), with the same JSON.

// Status is where a rollout stands.
type Status string

const (
	StatusPending   Status = "pending"   // waiting for the rollout it comes after, or for its sanity checks
	StatusRunning   Status = "running"   // machines move (also while an abort or a failure winds down)
	StatusPaused    Status = "paused"    // no new machine begins; machines already begun finish
	StatusSucceeded Status = "succeeded" // every machine is done (final)
	StatusFailed    Status = "failed"    // a check or a machine failed and nothing moves any more; Retry or Abort
	StatusAborted   Status = "aborted"   // aborted and wound down (final)
)

// Statuses lists every rollout status.
var Statuses = []Status{StatusPending, StatusRunning, StatusPaused, StatusSucceeded, StatusFailed, StatusAborted}

// Final reports whether nothing can ever change the rollout again.
func (s Status) Final() bool { return s == StatusSucceeded || s == StatusAborted }

// Step is a step of a machine's rollout: cordon, drain, reboot,
// wait_boot, wait_ready, uncordon.
type Step string

// Phase is where one machine stands in a rollout: waiting, active,
// failed, done or released.
type Phase string

// StepStatus is the state of a machine's current step: empty (none
// started), running, succeeded, failed or cancelled.
type StepStatus string

// NodeState is what the rollout did to a machine's node: untouched,
// maybe_cordoned, cordoned or uncordoned.
type NodeState string

// Outcome is a machine's state in a rollout's report: not_started, done,
// released, failed or in_progress.
type Outcome string

// View is the Operation of one rollout: its status, progress, machines,
// checks and log.
type View struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Pool     string `json:"pool"`
	Revision uint64 `json:"revision"`
	Rollback bool   `json:"rollback,omitempty"`
	After    string `json:"after,omitempty"`
	Status   Status `json:"status"`
	Aborting bool   `json:"aborting,omitempty"`
	// Reason: why it failed. Refused: it never started (Reason says
	// why); it is failed, and nothing can change it.
	Reason     string        `json:"reason,omitempty"`
	Refused    bool          `json:"refused,omitempty"`
	Progress   Progress      `json:"progress"`
	Machines   []Machine     `json:"machines"`
	Excluded   []Exclusion   `json:"excluded,omitempty"`
	Checks     []CheckResult `json:"checks,omitempty"`
	StartedAt  time.Time     `json:"started_at"`
	FinishedAt time.Time     `json:"finished_at,omitzero"`
	// Conditions say why it waits, if it does; LastProgressAt is when it
	// last moved, and EstimatedDoneAt when it should be done, once that
	// can be told.
	Conditions      []Condition `json:"conditions,omitempty"`
	LastProgressAt  time.Time   `json:"last_progress_at,omitzero"`
	EstimatedDoneAt time.Time   `json:"estimated_done_at,omitzero"`
	Log             []Entry     `json:"log"`
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

// Machine is one machine's row in a rollout.
type Machine struct {
	MachineReport
	Phase      Phase       `json:"phase"`
	StepStatus StepStatus  `json:"step_status,omitempty"`
	Attempt    int         `json:"attempt,omitempty"`
	Deadline   time.Time   `json:"deadline,omitzero"`
	Blocked    *DrainBlock `json:"blocked,omitempty"`
}

// MachineReport is where a machine stands, and in a finished rollout
// where it was left.
type MachineReport struct {
	UUID     string    `json:"uuid"`
	Hostname string    `json:"hostname"`
	Outcome  Outcome   `json:"outcome"`
	Node     NodeState `json:"node"`
	// Rebooted: the agent accepted a reboot into the target revision, so
	// the machine may run it even if it never reported so.
	Rebooted bool   `json:"rebooted,omitempty"`
	Step     Step   `json:"step,omitempty"` // where it failed
	Reason   string `json:"reason,omitempty"`
}

// DrainBlock is why a drain waits: the pod whose eviction a
// PodDisruptionBudget refuses, the budget, and for how long.
type DrainBlock struct {
	Pod       string          `json:"pod"`    // namespace/name
	Budget    string          `json:"budget"` // namespace/name of the PodDisruptionBudget
	WaitedFor values.Duration `json:"waited_for"`
	Message   string          `json:"message,omitempty"`
	At        time.Time       `json:"at"`
}

// Exclusion is a machine of the pool that the rollout leaves out, and why.
type Exclusion struct {
	UUID     string `json:"uuid"`
	Hostname string `json:"hostname,omitempty"`
	Reason   string `json:"reason"`
}

// CheckResult is the outcome of one sanity check.
type CheckResult struct {
	Name    string `json:"name"`
	Passed  bool   `json:"passed"`
	Reason  string `json:"reason,omitempty"`  // why it failed (or a note)
	Machine string `json:"machine,omitempty"` // the machine it is about, if any
}

// Condition says, as Cluster API's conditions do, what state an
// operation is in and why: Type names the aspect (Progressing,
// DrainBlocked), Status is True, False or Unknown, Reason is a CamelCase
// word a script can match, Message is for a person, and Until is when a
// wait lifts by itself, if known.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Until   time.Time `json:"until,omitzero"`
}

// Entry is one line of an operation's log.
type Entry struct {
	At      time.Time `json:"at"`
	Machine string    `json:"machine,omitempty"` // UUID; empty for the operation itself
	Node    string    `json:"node,omitempty"`    // hostname
	Step    Step      `json:"step,omitempty"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
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

// Strategy is how a rollout proceeds: the pool's rollout settings as
// they were when it started (durations are Go duration strings), the
// step timeouts the pool does not set, and the remediation cap.
type Strategy struct {
	MaxUnavailable     values.IntOrPercent `json:"max_unavailable,omitempty"`
	Pause              values.Duration     `json:"pause,omitempty"`
	DrainTimeout       values.Duration     `json:"drain_timeout,omitempty"`
	DrainGracePeriod   *values.Duration    `json:"drain_grace_period,omitempty"` // absent: each pod's own grace period
	NodeReadyTimeout   values.Duration     `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []values.Window     `json:"maintenance_windows,omitempty"`
	Remediation        *values.Remediation `json:"remediation,omitempty"`
	CordonTimeout      values.Duration     `json:"cordon_timeout,omitempty"`
	RebootTimeout      values.Duration     `json:"reboot_timeout,omitempty"` // until the agent accepts the instruction
	UncordonTimeout    values.Duration     `json:"uncordon_timeout,omitempty"`
	// RemediationMaxInFlight: at most this many machines of the rollout
	// get one more reboot when they booted but never came back; 0: none.
	RemediationMaxInFlight int `json:"remediation_max_in_flight,omitempty"`
}
