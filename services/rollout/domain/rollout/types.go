package rollout

import (
	"cmp"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// Step is one step of a machine's rollout. A machine walks them in this
// order; a machine without a node (never joined) skips cordon and drain.
type Step string

const (
	StepCordon    Step = "cordon"     // mark the node unschedulable
	StepDrain     Step = "drain"      // evict its pods through the Eviction API (PDBs hold)
	StepReboot    Step = "reboot"     // instruct the agent to reboot into the revision; done when it accepted
	StepWaitBoot  Step = "wait_boot"  // the agent reports that it booted the target revision
	StepWaitReady Step = "wait_ready" // the node is Ready
	StepUncordon  Step = "uncordon"   // mark the node schedulable again
)

// Steps lists every step in order.
var Steps = []Step{StepCordon, StepDrain, StepReboot, StepWaitBoot, StepWaitReady, StepUncordon}

// Disruptive reports whether the step takes capacity away or reboots the
// machine. Only disruptive steps wait for a maintenance window; the others
// give capacity back, and holding them would only prolong the disruption.
func (s Step) Disruptive() bool {
	return s == StepCordon || s == StepDrain || s == StepReboot
}

// Valid reports whether s is a known step.
func (s Step) Valid() bool { return slices.Contains(Steps, s) }

// Status is where a rollout (and the Operation that shows it) stands.
type Status string

const (
	StatusPending   Status = "pending"   // waiting for the rollout it comes after, or for its sanity checks
	StatusRunning   Status = "running"   // machines move (also while an abort or a failure winds down)
	StatusPaused    Status = "paused"    // no new machine begins; machines already begun finish
	StatusSucceeded Status = "succeeded" // every machine is done (final)
	StatusFailed    Status = "failed"    // a check or a machine failed and nothing moves any more; Retry or Abort
	StatusAborted   Status = "aborted"   // aborted and wound down (final)
)

// Final reports whether nothing can ever change the rollout again.
func (s Status) Final() bool { return s == StatusSucceeded || s == StatusAborted }

// Phase is where one machine stands in the rollout.
type Phase string

const (
	PhaseWaiting  Phase = "waiting"  // not begun; untouched
	PhaseActive   Phase = "active"   // begun: Step and StepStatus say where
	PhaseFailed   Phase = "failed"   // a step failed or timed out; its node stays cordoned
	PhaseDone     Phase = "done"     // at the target revision, Ready and uncordoned
	PhaseReleased Phase = "released" // abort: uncordoned without having rebooted; still at its old revision
)

// Out reports whether a machine in this phase counts against
// maxUnavailable: from the moment it begins until it is uncordoned.
func (p Phase) Out() bool { return p == PhaseActive || p == PhaseFailed }

// StepStatus is the state of a machine's current step.
type StepStatus string

const (
	StepStatusIdle      StepStatus = ""          // no step started yet
	StepStatusRunning   StepStatus = "running"   // started; no outcome yet (after a crash: re-drive it)
	StepStatusSucceeded StepStatus = "succeeded" // done; the next step may start
	StepStatusFailed    StepStatus = "failed"    // failed or timed out
	StepStatusCancelled StepStatus = "cancelled" // stopped by an abort before it took effect
)

// InstructionKind is what the agent is told to do (the boot service's
// instruction kinds).
type InstructionKind string

const (
	// KindReboot reboots into the target revision; the agent skips it
	// when it already runs that revision.
	KindReboot InstructionKind = "reboot"
	// KindReapply reboots even into the revision the machine runs:
	// re-applying the current revision re-reboots.
	KindReapply InstructionKind = "reapply"
)

// Machine is a machine as the rollout saw it when it started: the
// registry's view, snapshotted into the Started event so that the rollout
// never depends on reading the registry again for its order.
type Machine struct {
	UUID         string `json:"uuid"`
	Hostname     string `json:"hostname"` // the node name
	ControlPlane bool   `json:"control_plane,omitempty"`
	UpgradeIndex int    `json:"upgrade_index,omitempty"` // 0: unset (after every set one)
	// CurrentRevision is the pool revision the machine booted last (0:
	// none). Equal to the target, the instruction is a reapply.
	CurrentRevision uint64 `json:"current_revision,omitempty"`
	// NoNode is set for a machine that never joined its cluster (pending,
	// provisioning): it has no node to cordon or drain.
	NoNode bool `json:"no_node,omitempty"`
}

// Exclusion is a machine of the pool that the rollout leaves out, and why
// (in maintenance, already at the target, offline and not required, ...).
// It is reported, never touched.
type Exclusion struct {
	UUID     string `json:"uuid"`
	Hostname string `json:"hostname,omitempty"`
	Reason   string `json:"reason"`
}

// Order sorts machines into rollout order: control-plane machines first,
// then by upgradeIndex (set ones ascending, unset last), then by hostname,
// then by UUID so that the order is total.
func Order(ms []Machine) {
	slices.SortStableFunc(ms, compareMachines)
}

func compareMachines(a, b Machine) int {
	if a.ControlPlane != b.ControlPlane {
		if a.ControlPlane {
			return -1
		}
		return 1
	}
	ai, bi := a.UpgradeIndex, b.UpgradeIndex
	if ai <= 0 {
		ai = int(^uint(0) >> 1)
	}
	if bi <= 0 {
		bi = int(^uint(0) >> 1)
	}
	if c := cmp.Compare(ai, bi); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Hostname, b.Hostname); c != 0 {
		return c
	}
	return cmp.Compare(a.UUID, b.UUID)
}

// StepTimeouts are the timeouts of the steps that the pool does not set.
// The drain timeout and the node-ready timeout come from the pool.
type StepTimeouts struct {
	CordonTimeout   values.Duration `json:"cordon_timeout,omitempty"`
	RebootTimeout   values.Duration `json:"reboot_timeout,omitempty"` // until the agent accepts the instruction
	UncordonTimeout values.Duration `json:"uncordon_timeout,omitempty"`
}

// Step timeout defaults.
const (
	DefaultCordonTimeout   = values.Duration(5 * time.Minute)
	DefaultRebootTimeout   = values.Duration(15 * time.Minute)
	DefaultUncordonTimeout = values.Duration(5 * time.Minute)
	// MinReadyWindow is the least time wait_ready gets even when the boot
	// used up nearly all of the node-ready timeout, so that the node is
	// looked at at least once.
	MinReadyWindow = time.Minute
	// DrainBlockedEvery is how often a drain blocked by the same pod and
	// budget is written to the log.
	DrainBlockedEvery = time.Minute
)

// PoolSettings are the pool's rollout settings as the apply request (or
// the pool, for a rollout started by hand) carried them: the rollout
// service's own copy, with the same JSON, and the same rules
// (values.RolloutSettings, which the revisions service holds a pool's
// settings to), so that the rollout's history never depends on the
// revisions service's types.
type PoolSettings struct {
	MaxUnavailable     values.IntOrPercent `json:"max_unavailable,omitempty"`
	Pause              values.Duration     `json:"pause,omitempty"`
	DrainTimeout       values.Duration     `json:"drain_timeout,omitempty"`
	DrainGracePeriod   *values.Duration    `json:"drain_grace_period,omitempty"` // nil: each pod's own terminationGracePeriodSeconds
	NodeReadyTimeout   values.Duration     `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []values.Window     `json:"maintenance_windows,omitempty"`
	// Remediation: nil leaves it to the rollout service's setting
	// (--remediation-max-in-flight); see Strategy.RemediationMaxInFlight.
	Remediation *values.Remediation `json:"remediation,omitempty"`
}

// WithDefaults fills unset settings with the pool defaults.
func (p PoolSettings) WithDefaults() PoolSettings {
	return PoolSettings(values.RolloutSettings(p).WithDefaults())
}

// ResolveRemediation is how many machines of a rollout may be remediated
// at a time: the pool's setting, or fallback (the service's) when it has
// none. 0: off.
func (p PoolSettings) ResolveRemediation(fallback int) int {
	return values.RolloutSettings(p).ResolveRemediation(fallback)
}

// Validate checks the settings by the pool's rules (after defaults).
func (p PoolSettings) Validate() error {
	var f errs.Fields
	for _, pr := range values.RolloutSettings(p).Problems() {
		f.Add(pr.Field, "%s", pr.Reason)
	}
	return f.Err()
}

// Strategy is how the rollout proceeds: the pool's rollout settings as
// they were when the apply was requested (pool.apply_requested carries
// them), plus the step timeouts the pool does not set. It is part of the
// Started event: changing the pool's settings later does not change a
// rollout under way.
type Strategy struct {
	PoolSettings
	StepTimeouts
	// RemediationMaxInFlight, when positive, lets the rollout remediate a
	// machine that booted but never came back (wait_boot or wait_ready
	// timed out): one more reboot into the revision (a reapply), at most
	// this many machines of the rollout at a time and once per machine,
	// as Cluster API's MachineHealthCheck caps remediation. 0: a machine
	// that never rejoins fails and waits for an operator. It is the rollout
	// service's setting, frozen at start.
	RemediationMaxInFlight int `json:"remediation_max_in_flight,omitempty"`
}

// MaxRemediations is how often one machine is remediated in a rollout.
const MaxRemediations = 1

// WithDefaults fills unset fields.
func (s Strategy) WithDefaults() Strategy {
	s.PoolSettings = s.PoolSettings.WithDefaults()
	if s.CordonTimeout == 0 {
		s.CordonTimeout = DefaultCordonTimeout
	}
	if s.RebootTimeout == 0 {
		s.RebootTimeout = DefaultRebootTimeout
	}
	if s.UncordonTimeout == 0 {
		s.UncordonTimeout = DefaultUncordonTimeout
	}
	return s
}

// Validate checks a strategy (after defaults): the pool's rules, and the
// step timeouts between 1s and 24h.
func (s Strategy) Validate() error {
	var f errs.Fields
	f.Merge("", s.PoolSettings.Validate())
	if s.RemediationMaxInFlight < 0 || s.RemediationMaxInFlight > values.MaxRemediationInFlight {
		f.Add("remediation_max_in_flight", "must be between 0 and %d, got %d", values.MaxRemediationInFlight, s.RemediationMaxInFlight)
	}
	for _, t := range []struct {
		name string
		d    values.Duration
	}{{"cordon_timeout", s.CordonTimeout}, {"reboot_timeout", s.RebootTimeout}, {"uncordon_timeout", s.UncordonTimeout}} {
		if t.d < values.Duration(time.Second) || t.d > maxTimeout {
			f.Add(t.name, "must be between 1s and 24h, got %s", t.d)
		}
	}
	return f.Err()
}

// Timeout is how long a step may run. wait_ready shares the node-ready
// timeout with wait_boot (see State.deadline).
func (s Strategy) Timeout(step Step) time.Duration {
	switch step {
	case StepCordon:
		return s.CordonTimeout.Std()
	case StepDrain:
		return s.DrainTimeout.Std()
	case StepReboot:
		return s.RebootTimeout.Std()
	case StepWaitBoot, StepWaitReady:
		return s.NodeReadyTimeout.Std()
	case StepUncordon:
		return s.UncordonTimeout.Std()
	}
	return 0
}

// Check names: the sanity checks that must all pass before any machine is
// touched. The service layer gathers the facts (package checks evaluates
// them) and records the results with RecordChecks.
const (
	CheckClusterReachable = "cluster_reachable" // the cluster's API answers with the stored credentials
	CheckVersionSkew      = "version_skew"      // the target kubelet fits the control plane's version
	CheckExclusive        = "exclusive"         // no other active rollout holds any of the machines
	CheckMachinesHealthy  = "machines_healthy"  // every machine online, its node Ready, not in maintenance or deleting
	CheckCapacity         = "capacity"          // PodDisruptionBudgets leave room for maxUnavailable nodes out
)

// RequiredChecks lists every check RecordChecks must report.
var RequiredChecks = []string{CheckClusterReachable, CheckVersionSkew, CheckExclusive, CheckMachinesHealthy, CheckCapacity}

// CheckResult is the outcome of one sanity check. A check may be reported
// several times (once per machine, say); every failure is kept.
type CheckResult struct {
	Name    string `json:"name"`
	Passed  bool   `json:"passed"`
	Reason  string `json:"reason,omitempty"`  // why it failed (or a note)
	Machine string `json:"machine,omitempty"` // the machine it is about, if any
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

// Failure is why a machine failed.
type Failure struct {
	Step     Step      `json:"step"`
	Attempt  int       `json:"attempt"`
	Reason   string    `json:"reason"`
	TimedOut bool      `json:"timed_out,omitempty"`
	At       time.Time `json:"at"`
}

// NodeState is what the rollout knows about a machine's node's
// schedulability, for the report: nothing is left cordoned without saying
// so.
type NodeState string

const (
	NodeUntouched     NodeState = "untouched"      // never cordoned by this rollout (or no node)
	NodeMaybeCordoned NodeState = "maybe_cordoned" // a cordon was under way
	NodeCordoned      NodeState = "cordoned"
	NodeUncordoned    NodeState = "uncordoned"
)

// Outcome is a machine's final state in a finished rollout.
type Outcome string

const (
	OutcomeNotStarted Outcome = "not_started" // never touched
	OutcomeDone       Outcome = "done"        // at the target revision, Ready, uncordoned
	OutcomeReleased   Outcome = "released"    // uncordoned by the abort; never rebooted; old revision
	OutcomeFailed     Outcome = "failed"      // a step failed; Node says whether its node stays cordoned
	OutcomeInProgress Outcome = "in_progress" // still moving (only in a report taken mid-way)
)

// MachineReport is one machine's final state, written into the Failed and
// Aborted events so that the log itself says what was left where.
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
