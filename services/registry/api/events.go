package api

import "time"

// Integration events: the registry's machine events that other services
// consume (the boot service revokes credentials on them, the rollout
// service provisions machines and starts machine operations). They are
// plain copies of the registry's stored events, with the same event type
// names and JSON; a consumer registers EventTypes in its own
// events.Registry and decodes the registry's events into these.
//
// Compatibility: within a schema version an event changes only
// additively (a new optional field, never a renamed, retyped or removed
// one, never a new meaning for an old value), so a consumer built against
// an older api decodes a newer registry's events. Anything else is a new
// schema version with an upcaster, announced before it is written. The
// registry's tests check that each type here encodes exactly as the
// registry's own event does.

// Preregistered: an operator described the machine before its first boot.
type Preregistered struct {
	UUID         string            `json:"uuid"`
	Hostname     string            `json:"hostname,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	UpgradeIndex int               `json:"upgrade_index,omitempty"`
	ControlPlane bool              `json:"control_plane,omitempty"`
}

// Registered: the machine iPXE-booted and registered itself with an
// enrollment token (a new life, after a deletion too). BootedAt is the
// boot service's time of that boot.
type Registered struct {
	UUID              string    `json:"uuid"`
	MAC               string    `json:"mac"`
	EnrollmentTokenID string    `json:"enrollment_token_id"`
	BootedAt          time.Time `json:"booted_at"`
}

// AssignedToPool: the machine was assigned to Pool.
type AssignedToPool struct {
	Pool string `json:"pool"`
}

// UnassignStarted: the machine is drained before it leaves Pool.
type UnassignStarted struct {
	Pool string `json:"pool"`
}

// Unassigned: the machine left Pool (after a drain, or with nothing to drain).
type Unassigned struct {
	Pool string `json:"pool"`
}

// ForceUnassigned: the machine left Pool without waiting for a drain.
type ForceUnassigned struct {
	Pool string `json:"pool"`
}

// MaintenanceRequested: maintenance was turned on; the node is to be drained.
type MaintenanceRequested struct{}

// MaintenanceExited: maintenance was turned off; the node is to be uncordoned.
type MaintenanceExited struct{}

// DeletionStarted: a graceful deletion starts preparing (drain), or an
// unsafe one goes straight to removing the node.
type DeletionStarted struct {
	Policy DeletionPolicy `json:"policy"`
}

// DeletionAborting: the deletion is being undone (uncordon).
type DeletionAborting struct{}

// Deleted: the machine no longer exists. A forced deletion removed it at
// once, leaving its Node to clean up.
type Deleted struct {
	Policy DeletionPolicy `json:"policy"`
}

func (Preregistered) EventType() string        { return "machine.preregistered" }
func (Registered) EventType() string           { return "machine.registered" }
func (AssignedToPool) EventType() string       { return "machine.assigned_to_pool" }
func (UnassignStarted) EventType() string      { return "machine.unassign_started" }
func (Unassigned) EventType() string           { return "machine.unassigned" }
func (ForceUnassigned) EventType() string      { return "machine.force_unassigned" }
func (MaintenanceRequested) EventType() string { return "machine.maintenance_requested" }
func (MaintenanceExited) EventType() string    { return "machine.maintenance_exited" }
func (DeletionStarted) EventType() string      { return "machine.deletion_started" }
func (DeletionAborting) EventType() string     { return "machine.deletion_aborting" }
func (Deleted) EventType() string              { return "machine.deleted" }

// EventTypes returns a zero value of every integration event, for a
// consumer's events.Registry.RegisterAll.
func EventTypes() []any {
	return []any{
		Preregistered{}, Registered{}, AssignedToPool{},
		UnassignStarted{}, Unassigned{}, ForceUnassigned{},
		MaintenanceRequested{}, MaintenanceExited{},
		DeletionStarted{}, DeletionAborting{}, Deleted{},
	}
}
