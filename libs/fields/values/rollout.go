package values

import (
	"fmt"
	"time"
)

// RolloutSettings are a pool's rollout settings: how its revisions are
// rolled out over its machines. None of them needs a reboot, so changing
// them never makes a revision.
//
// The revisions service holds a pool's settings to these rules, and hands
// them to the rollout service with every apply; the rollout service checks
// them again when it starts a rollout (the apply may predate a rule). Each
// service stores them in a type of its own with this shape, converted to
// this one for the rules (the compiler checks that the shapes agree), so
// that neither service's stored events depend on the other's types.
type RolloutSettings struct {
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

// Remediation is a pool's remediation setting: at most MaxInFlight
// machines of a rollout are remediated at a time (one more reboot into
// the revision, once per machine, when wait_boot or wait_ready timed
// out); 0 turns remediation off.
type Remediation struct {
	MaxInFlight int `json:"max_in_flight"`
}

// Rollout settings' defaults and limits.
const (
	DefaultMaxUnavailable   = IntOrPercent("1")
	DefaultDrainTimeout     = Duration(15 * time.Minute)
	DefaultNodeReadyTimeout = Duration(2 * time.Hour)
	// MaxRemediationInFlight bounds Remediation.MaxInFlight (as the
	// rollout service bounds its flag).
	MaxRemediationInFlight = 1000
	// MaxMaintenanceWindows bounds a pool's maintenance windows.
	MaxMaintenanceWindows = 32
)

// ResolveRemediation is how many machines of a rollout may be remediated
// at a time: the pool's setting, or fallback (the rollout service's
// default) when the pool has none. 0: off.
func (r RolloutSettings) ResolveRemediation(fallback int) int {
	if r.Remediation == nil {
		return fallback
	}
	return r.Remediation.MaxInFlight
}

// WithDefaults fills unset fields. A drain always has a timeout: a drain
// that can hang forever on a PodDisruptionBudget is the bug we avoid.
func (r RolloutSettings) WithDefaults() RolloutSettings {
	if r.MaxUnavailable == "" {
		r.MaxUnavailable = DefaultMaxUnavailable
	}
	if r.DrainTimeout == 0 {
		r.DrainTimeout = DefaultDrainTimeout
	}
	if r.NodeReadyTimeout == 0 {
		r.NodeReadyTimeout = DefaultNodeReadyTimeout
	}
	return r
}

// Problems lists what breaks the rules, field by field (JSON paths);
// none for valid settings. Unset durations are allowed: they take their
// defaults.
func (r RolloutSettings) Problems() []Problem {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	const day = Duration(24 * time.Hour)
	if r.MaxUnavailable != "" {
		if err := r.MaxUnavailable.Check(); err != nil {
			add("max_unavailable", "%v", err)
		}
	}
	if r.Pause < 0 || r.Pause > day {
		add("pause", "must be between 0s and 24h, got %s", r.Pause)
	}
	if r.DrainTimeout < 0 || r.DrainTimeout > day {
		add("drain_timeout", "must be between 1s and 24h, got %s", r.DrainTimeout)
	} else if r.DrainTimeout != 0 && r.DrainTimeout < Duration(time.Second) {
		add("drain_timeout", "must be at least 1s, got %s", r.DrainTimeout)
	}
	if g := r.DrainGracePeriod; g != nil && (*g < 0 || *g > day) {
		add("drain_grace_period", "must be between 0s and 24h, got %s", *g)
	}
	if r.NodeReadyTimeout < 0 || r.NodeReadyTimeout > day {
		add("node_ready_timeout", "must be between 1m and 24h, got %s", r.NodeReadyTimeout)
	} else if r.NodeReadyTimeout != 0 && r.NodeReadyTimeout < Duration(time.Minute) {
		add("node_ready_timeout", "must be at least 1m, got %s", r.NodeReadyTimeout)
	}
	if m := r.Remediation; m != nil && (m.MaxInFlight < 0 || m.MaxInFlight > MaxRemediationInFlight) {
		add("remediation.max_in_flight", "must be between 0 (off) and %d, got %d", MaxRemediationInFlight, m.MaxInFlight)
	}
	if len(r.MaintenanceWindows) > MaxMaintenanceWindows {
		add("maintenance_windows", "at most %d windows, got %d", MaxMaintenanceWindows, len(r.MaintenanceWindows))
	}
	for i, w := range r.MaintenanceWindows {
		ps = append(ps, prefixed(fmt.Sprintf("maintenance_windows[%d]", i), w.Problems())...)
	}
	return ps
}
