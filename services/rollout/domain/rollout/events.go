package rollout

import "time"

// The events of a rollout, on the subject events.<org>.rollout.<id>. Every
// event carries the instant it describes (At): the fold never reads a
// clock, and the Operation log shows these times.
//
// The boot service's rollout.reboot_requested and
// rollout.instruction_withdrawn (services/boot/api) live on the same
// subject: the service layer appends them, and Apply ignores them.

// Started: a rollout was asked for (a pool.apply_requested, or one machine).
// Machines are in rollout order; the fold keeps that order even if the
// ordering rules change later.
type Started struct {
	ID       string `json:"id"`
	Pool     string `json:"pool"`
	Cluster  string `json:"cluster,omitempty"`
	Revision uint64 `json:"revision"` // the target pool revision
	Hash     string `json:"hash,omitempty"`
	Rollback bool   `json:"rollback,omitempty"` // older than the revision applied before
	// After is a rollout that must succeed before this one moves.
	After       string      `json:"after,omitempty"`
	PoolSize    int         `json:"pool_size"` // what a percentage maxUnavailable is of
	Machines    []Machine   `json:"machines"`
	Excluded    []Exclusion `json:"excluded,omitempty"`
	Strategy    Strategy    `json:"strategy"`
	RequestedBy string      `json:"requested_by,omitempty"`
	// Provisioning: a machine's own first rollout (see Start).
	Provisioning bool      `json:"provisioning,omitempty"`
	At           time.Time `json:"at"`
}

// StartRefused: a rollout that was asked for (a pool.apply_requested)
// cannot start, for a reason that retrying does not fix: the request or
// the pool's machines break the rollout's rules. It takes the place of
// Started under the id the request announced, so that whoever follows
// that id finds a failed rollout and the reason rather than nothing.
// Nothing was touched and nothing can change it any more (see
// State.Refused); another apply starts another rollout.
type StartRefused struct {
	ID          string    `json:"id"`
	Pool        string    `json:"pool"`
	Cluster     string    `json:"cluster,omitempty"`
	Revision    uint64    `json:"revision"`
	Reason      string    `json:"reason"`
	RequestedBy string    `json:"requested_by,omitempty"`
	At          time.Time `json:"at"`
}

// DependencyResolved: the rollout this one comes after finished. Succeeded
// lets this one go on; aborted fails it (a failed one is not final, so it
// is not reported: this one keeps waiting).
type DependencyResolved struct {
	Rollout string    `json:"rollout"`
	Outcome Status    `json:"outcome"` // succeeded or aborted
	At      time.Time `json:"at"`
}

// ChecksRecorded: the sanity checks ran. If any failed, Failed follows and
// no machine was touched.
type ChecksRecorded struct {
	Results []CheckResult `json:"results"`
	At      time.Time     `json:"at"`
}

// MachineBegun: a machine starts its rollout and counts against
// maxUnavailable from now on. It is written before anything touches it.
type MachineBegun struct {
	Machine string    `json:"machine"`
	At      time.Time `json:"at"`
}

// StepStarted: a step of a machine starts. It is written BEFORE the step's
// external action is taken, so that a new process instance that finds it
// without an outcome re-drives the same step: cordon, drain and uncordon
// are idempotent, and a reboot is re-sent with the same InstructionID,
// which the boot service deduplicates.
type StepStarted struct {
	Machine string `json:"machine"`
	Step    Step   `json:"step"`
	Attempt int    `json:"attempt"` // 1, then one more for each retry of this step
	// InstructionID and Kind are set for the reboot step: the dedup id the
	// boot service and the agent see.
	InstructionID string          `json:"instruction_id,omitempty"`
	Kind          InstructionKind `json:"kind,omitempty"`
	// Release marks the uncordon of an abort, for a machine that never
	// rebooted.
	Release  bool      `json:"release,omitempty"`
	Deadline time.Time `json:"deadline"`
	At       time.Time `json:"at"`
}

// StepSucceeded: the step's action took effect.
type StepSucceeded struct {
	Machine    string    `json:"machine"`
	Step       Step      `json:"step"`
	Attempt    int       `json:"attempt"`
	Message    string    `json:"message,omitempty"`
	NodeBootID string    `json:"node_boot_id,omitempty"` // cordon: the node's boot id before the reboot
	At         time.Time `json:"at"`
}

// StepFailed: the step failed or timed out. The machine fails, its node
// stays cordoned, and no new machine begins until a Retry.
type StepFailed struct {
	Machine  string    `json:"machine"`
	Step     Step      `json:"step"`
	Attempt  int       `json:"attempt"`
	Reason   string    `json:"reason"`
	TimedOut bool      `json:"timed_out,omitempty"`
	At       time.Time `json:"at"`
}

// StepCancelled: an abort stopped a cordon, a drain, or a reboot whose
// instruction was withdrawn before the agent accepted it. The machine has
// not rebooted and is released (uncordoned) next.
type StepCancelled struct {
	Machine string    `json:"machine"`
	Step    Step      `json:"step"`
	Attempt int       `json:"attempt"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// DrainBlocked: a PodDisruptionBudget refuses an eviction. It changes
// nothing but the log, which names the pod, the budget and the wait.
type DrainBlocked struct {
	Machine string     `json:"machine"`
	Attempt int        `json:"attempt"`
	Block   DrainBlock `json:"block"`
}

// MachineRemediated: a machine that booted but never came back (wait_boot
// or wait_ready timed out) is given one more reboot into the revision: its
// reboot step starts again as a new attempt, with a reapply instruction.
type MachineRemediated struct {
	Machine string    `json:"machine"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// MachineDone: the machine runs the target revision, its node is Ready
// and uncordoned.
type MachineDone struct {
	Machine string    `json:"machine"`
	At      time.Time `json:"at"`
}

// MachineReleased: an abort uncordoned a machine that had not rebooted; it
// still runs its old revision.
type MachineReleased struct {
	Machine string    `json:"machine"`
	At      time.Time `json:"at"`
}

// Paused: no new machine begins until Resumed.
type Paused struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Resumed ends a pause.
type Resumed struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// AbortRequested: wind the rollout down. Machines that have not rebooted
// are uncordoned; machines that have rebooted finish their steps.
type AbortRequested struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Retried: a failed rollout goes on. Failed machines resume at the step
// that failed; failed sanity checks run again.
type Retried struct {
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Succeeded: every machine is done. Final.
type Succeeded struct {
	At time.Time `json:"at"`
}

// Failed: a check or a machine failed and nothing is in flight any more.
// Machines lists every machine's state: which nodes stay cordoned.
type Failed struct {
	Reason   string          `json:"reason"`
	Machines []MachineReport `json:"machines,omitempty"`
	At       time.Time       `json:"at"`
}

// MachinesReported: the final state of some of the machines, appended
// just before Failed or Aborted when every machine's would not fit in one
// event (the server refuses a message over its maximum payload). Their
// Machines together with the final event's are every machine's.
type MachinesReported struct {
	Machines []MachineReport `json:"machines"`
	At       time.Time       `json:"at"`
}

// Aborted: the abort wound down. Machines lists every machine's final
// state. Final.
type Aborted struct {
	Machines []MachineReport `json:"machines,omitempty"`
	At       time.Time       `json:"at"`
}

func (Started) EventType() string            { return "rollout.started" }
func (MachinesReported) EventType() string   { return "rollout.machines_reported" }
func (StartRefused) EventType() string       { return "rollout.start_refused" }
func (DependencyResolved) EventType() string { return "rollout.dependency_resolved" }
func (ChecksRecorded) EventType() string     { return "rollout.checks_recorded" }
func (MachineBegun) EventType() string       { return "rollout.machine_begun" }
func (StepStarted) EventType() string        { return "rollout.step_started" }
func (StepSucceeded) EventType() string      { return "rollout.step_succeeded" }
func (StepFailed) EventType() string         { return "rollout.step_failed" }
func (StepCancelled) EventType() string      { return "rollout.step_cancelled" }
func (DrainBlocked) EventType() string       { return "rollout.drain_blocked" }
func (MachineDone) EventType() string        { return "rollout.machine_done" }
func (MachineRemediated) EventType() string  { return "rollout.machine_remediated" }
func (MachineReleased) EventType() string    { return "rollout.machine_released" }
func (Paused) EventType() string             { return "rollout.paused" }
func (Resumed) EventType() string            { return "rollout.resumed" }
func (AbortRequested) EventType() string     { return "rollout.abort_requested" }
func (Retried) EventType() string            { return "rollout.retried" }
func (Succeeded) EventType() string          { return "rollout.succeeded" }
func (Failed) EventType() string             { return "rollout.failed" }
func (Aborted) EventType() string            { return "rollout.aborted" }

// EventTypes returns a zero value of every payload, for registration.
func EventTypes() []any {
	return []any{
		Started{}, StartRefused{}, DependencyResolved{}, ChecksRecorded{}, MachineBegun{},
		StepStarted{}, StepSucceeded{}, StepFailed{}, StepCancelled{}, DrainBlocked{},
		MachineDone{}, MachineReleased{}, MachineRemediated{}, Paused{}, Resumed{}, AbortRequested{}, Retried{},
		Succeeded{}, Failed{}, Aborted{}, MachinesReported{},
	}
}
