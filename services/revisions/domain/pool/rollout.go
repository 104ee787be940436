package pool

import (
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
)

// Rollout holds how revisions of this pool are rolled out. None of it
// needs a reboot, so changing it never makes a revision. Its rules are
// values.RolloutSettings', which the rollout service applies too.
type Rollout struct {
	MaxUnavailable     IntOrPercent `json:"max_unavailable,omitempty"`
	Pause              Duration     `json:"pause,omitempty"`
	DrainTimeout       Duration     `json:"drain_timeout,omitempty"`
	DrainGracePeriod   *Duration    `json:"drain_grace_period,omitempty"` // nil: each pod's own terminationGracePeriodSeconds
	NodeReadyTimeout   Duration     `json:"node_ready_timeout,omitempty"`
	MaintenanceWindows []Window     `json:"maintenance_windows,omitempty"`
	// Remediation is whether a rollout gives a machine that booted but
	// never came back one more reboot; nil leaves it to the rollout
	// service (--remediation-max-in-flight).
	Remediation *Remediation `json:"remediation,omitempty"`
}

// The plain values a pool's rollout settings are made of (shared with the
// rollout service, which checks them alike).
type (
	Remediation  = values.Remediation
	IntOrPercent = values.IntOrPercent
	Duration     = values.Duration
	Window       = values.Window
)

// MaxRemediationInFlight bounds Remediation.MaxInFlight (as the rollout
// service bounds its flag).
const MaxRemediationInFlight = values.MaxRemediationInFlight

// Rollout defaults.
const (
	DefaultMaxUnavailable   = values.DefaultMaxUnavailable
	DefaultDrainTimeout     = values.DefaultDrainTimeout
	DefaultNodeReadyTimeout = values.DefaultNodeReadyTimeout
)

// ResolveRemediation is how many machines of a rollout may be remediated
// at a time: the pool's setting, or fallback (the rollout service's
// default) when the pool has none. 0: off.
func (r Rollout) ResolveRemediation(fallback int) int {
	return values.RolloutSettings(r).ResolveRemediation(fallback)
}

// WithDefaults fills unset fields. A drain always has a timeout: a drain
// that can hang forever on a PodDisruptionBudget is the bug we avoid.
func (r Rollout) WithDefaults() Rollout { return Rollout(values.RolloutSettings(r).WithDefaults()) }

// Validate checks a rollout strategy (after defaults).
func (r Rollout) Validate() error {
	var f errs.Fields
	for _, p := range values.RolloutSettings(r).Problems() {
		f.Add(p.Field, "%s", p.Reason)
	}
	return f.Err()
}

// InMaintenanceWindow reports whether t is inside any window. With no
// windows a pool may be rolled out at any time.
func InMaintenanceWindow(windows []Window, t time.Time) bool {
	return values.InMaintenanceWindow(windows, t)
}
