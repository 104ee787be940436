package machine

import "time"

// Event is implemented by every machine event payload.
type Event interface {
	EventType() string
	machineEvent()
}

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
// enrollment token. A pre-registered machine keeps its configuration.
type Registered struct {
	UUID              string    `json:"uuid"`
	MAC               string    `json:"mac"`
	EnrollmentTokenID string    `json:"enrollment_token_id"`
	BootedAt          time.Time `json:"booted_at"`
}

type HostnameChanged struct {
	Hostname string `json:"hostname"`
}

type LabelsChanged struct {
	Labels map[string]string `json:"labels"`
}

type UpgradeIndexChanged struct {
	UpgradeIndex int `json:"upgrade_index"` // 0: unset
}

type ControlPlaneChanged struct {
	ControlPlane bool `json:"control_plane"`
}

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

// TargetRevisionSet: a rollout moves the machine to Revision.
type TargetRevisionSet struct {
	Revision uint64 `json:"revision"`
}

// BecameReady: the node joined, is Ready and uncordoned at Revision.
type BecameReady struct {
	Revision uint64 `json:"revision"`
}

// Failed: the step in progress (During) failed.
type Failed struct {
	Reason string `json:"reason"`
	During Status `json:"during"`
	Step   string `json:"step,omitempty"`
}

// MaintenanceRequested: maintenance was turned on; the node is being drained.
type MaintenanceRequested struct{}

// MaintenanceEntered: the node is cordoned and drained (or has no node).
type MaintenanceEntered struct{}

// MaintenanceExited: maintenance was turned off; the node is uncordoned.
type MaintenanceExited struct{}

// DeletionStarted: a graceful deletion starts preparing, or an unsafe one
// goes straight to removing the node.
type DeletionStarted struct {
	Policy DeletionPolicy `json:"policy"`
}

// DeletionPrepared: a graceful deletion's drain completed.
type DeletionPrepared struct{}

// DeletionAborting: the deletion is being undone (uncordon).
type DeletionAborting struct{}

// DeletionAborted: the machine is back in the status it had before.
type DeletionAborted struct{}

// DeletionFailed: the deletion workflow failed.
type DeletionFailed struct {
	Reason string `json:"reason"`
}

// Deleted: the machine no longer exists.
type Deleted struct {
	Policy DeletionPolicy `json:"policy"`
}

// IPXEBooted: the machine iPXE-booted and reached the boot service.
type IPXEBooted struct {
	At time.Time `json:"at"`
	// RetryBy is when the firmware said it would ask again (the boot
	// script's back-off), if it was told to wait.
	RetryBy time.Time `json:"retry_by,omitzero"`
}

// IgnitionCompleted: Flatcar fetched its Ignition config.
type IgnitionCompleted struct {
	At time.Time `json:"at"`
}

// RevisionBooted: the agent reports the revision it booted.
type RevisionBooted struct {
	Revision uint64    `json:"revision"`
	At       time.Time `json:"at"`
}

type HardwareReported struct {
	Hardware Hardware  `json:"hardware"`
	At       time.Time `json:"at"`
}

type RebootRequiredChanged struct {
	Required bool   `json:"required"`
	Reason   string `json:"reason,omitempty"`
}

// WentOffline: no heartbeat since LastSeenAt for longer than the threshold.
type WentOffline struct {
	LastSeenAt time.Time `json:"last_seen_at"`
	At         time.Time `json:"at"`
}

// CameOnline: heartbeats resumed (or started) at LastSeenAt.
type CameOnline struct {
	LastSeenAt time.Time `json:"last_seen_at"`
	At         time.Time `json:"at"`
}

func (Preregistered) EventType() string         { return "machine.preregistered" }
func (Registered) EventType() string            { return "machine.registered" }
func (HostnameChanged) EventType() string       { return "machine.hostname_changed" }
func (LabelsChanged) EventType() string         { return "machine.labels_changed" }
func (UpgradeIndexChanged) EventType() string   { return "machine.upgrade_index_changed" }
func (ControlPlaneChanged) EventType() string   { return "machine.control_plane_changed" }
func (AssignedToPool) EventType() string        { return "machine.assigned_to_pool" }
func (UnassignStarted) EventType() string       { return "machine.unassign_started" }
func (Unassigned) EventType() string            { return "machine.unassigned" }
func (ForceUnassigned) EventType() string       { return "machine.force_unassigned" }
func (TargetRevisionSet) EventType() string     { return "machine.target_revision_set" }
func (BecameReady) EventType() string           { return "machine.became_ready" }
func (Failed) EventType() string                { return "machine.failed" }
func (MaintenanceRequested) EventType() string  { return "machine.maintenance_requested" }
func (MaintenanceEntered) EventType() string    { return "machine.maintenance_entered" }
func (MaintenanceExited) EventType() string     { return "machine.maintenance_exited" }
func (DeletionStarted) EventType() string       { return "machine.deletion_started" }
func (DeletionPrepared) EventType() string      { return "machine.deletion_prepared" }
func (DeletionAborting) EventType() string      { return "machine.deletion_aborting" }
func (DeletionAborted) EventType() string       { return "machine.deletion_aborted" }
func (DeletionFailed) EventType() string        { return "machine.deletion_failed" }
func (Deleted) EventType() string               { return "machine.deleted" }
func (IPXEBooted) EventType() string            { return "machine.ipxe_booted" }
func (IgnitionCompleted) EventType() string     { return "machine.ignition_completed" }
func (RevisionBooted) EventType() string        { return "machine.revision_booted" }
func (HardwareReported) EventType() string      { return "machine.hardware_reported" }
func (RebootRequiredChanged) EventType() string { return "machine.reboot_required_changed" }
func (WentOffline) EventType() string           { return "machine.went_offline" }
func (CameOnline) EventType() string            { return "machine.came_online" }

func (Preregistered) machineEvent()         {}
func (Registered) machineEvent()            {}
func (HostnameChanged) machineEvent()       {}
func (LabelsChanged) machineEvent()         {}
func (UpgradeIndexChanged) machineEvent()   {}
func (ControlPlaneChanged) machineEvent()   {}
func (AssignedToPool) machineEvent()        {}
func (UnassignStarted) machineEvent()       {}
func (Unassigned) machineEvent()            {}
func (ForceUnassigned) machineEvent()       {}
func (TargetRevisionSet) machineEvent()     {}
func (BecameReady) machineEvent()           {}
func (Failed) machineEvent()                {}
func (MaintenanceRequested) machineEvent()  {}
func (MaintenanceEntered) machineEvent()    {}
func (MaintenanceExited) machineEvent()     {}
func (DeletionStarted) machineEvent()       {}
func (DeletionPrepared) machineEvent()      {}
func (DeletionAborting) machineEvent()      {}
func (DeletionAborted) machineEvent()       {}
func (DeletionFailed) machineEvent()        {}
func (Deleted) machineEvent()               {}
func (IPXEBooted) machineEvent()            {}
func (IgnitionCompleted) machineEvent()     {}
func (RevisionBooted) machineEvent()        {}
func (HardwareReported) machineEvent()      {}
func (RebootRequiredChanged) machineEvent() {}
func (WentOffline) machineEvent()           {}
func (CameOnline) machineEvent()            {}

// EventTypes returns a zero value of every event payload, for registering
// them with the event store's codec.
func EventTypes() []any {
	return []any{
		Preregistered{}, Registered{},
		HostnameChanged{}, LabelsChanged{}, UpgradeIndexChanged{}, ControlPlaneChanged{},
		AssignedToPool{}, UnassignStarted{}, Unassigned{}, ForceUnassigned{},
		TargetRevisionSet{}, BecameReady{}, Failed{},
		MaintenanceRequested{}, MaintenanceEntered{}, MaintenanceExited{},
		DeletionStarted{}, DeletionPrepared{}, DeletionAborting{}, DeletionAborted{}, DeletionFailed{}, Deleted{},
		IPXEBooted{}, IgnitionCompleted{}, RevisionBooted{}, HardwareReported{}, RebootRequiredChanged{},
		WentOffline{}, CameOnline{},
	}
}
