package api

import (
	"time"

	"github.com/anvil-fleet/anvil/libs/fields"
)

// Machine is the machine as the API shows it. Its JSON is the registry's
// answer on NATS and the gateway's HTTP body alike; the registry's tests
// check that it encodes exactly as the registry's own state does.
type Machine struct {
	Org      string `json:"org"`
	UUID     string `json:"uuid"`
	Status   Status `json:"status"`
	Hostname string `json:"hostname,omitempty"`
	// NodeName is the name of the machine's Kubernetes Node: its hostname,
	// or its UUID when it has none (see NodeNameOf).
	NodeName          string            `json:"node_name,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Pool              string            `json:"pool,omitempty"`
	UpgradeIndex      int               `json:"upgrade_index,omitempty"` // 0: unset
	ControlPlane      bool              `json:"control_plane,omitempty"`
	MAC               string            `json:"mac,omitempty"` // the MAC it first iPXE-booted from
	EnrollmentTokenID string            `json:"enrollment_token_id,omitempty"`
	RegisteredAt      time.Time         `json:"registered_at,omitzero"`

	CurrentRevision   uint64    `json:"current_revision,omitempty"` // what it booted, per its agent
	CurrentRevisionAt time.Time `json:"current_revision_at,omitzero"`
	TargetRevision    uint64    `json:"target_revision,omitempty"` // what a rollout moves it to

	// MaintenanceReturn is the status it goes back to when maintenance ends.
	MaintenanceReturn Status    `json:"maintenance_return,omitempty"`
	Failure           *Failure  `json:"failure,omitempty"`
	Deletion          *Deletion `json:"deletion,omitempty"`

	Hardware           *Hardware `json:"hardware,omitempty"`
	HardwareReportedAt time.Time `json:"hardware_reported_at,omitzero"`
	Reboot             Reboot    `json:"reboot,omitzero"`

	Connectivity      Connectivity `json:"connectivity,omitempty"`
	ConnectivitySince time.Time    `json:"connectivity_since,omitzero"`
	LastIPXEBootAt    time.Time    `json:"last_ipxe_boot_at,omitzero"`
	// IPXERetryBy is when the firmware, told to wait at its last iPXE
	// boot, said it would ask again.
	IPXERetryBy    time.Time `json:"ipxe_retry_by,omitzero"`
	LastIgnitionAt time.Time `json:"last_ignition_at,omitzero"`

	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// LastSeen is the agent's last heartbeat. It stays the last field: the
	// registry appends it to a machine's cached encoding on each read.
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Status is where a machine is in its lifecycle; docs/machine-states.md is
// the reference.
type Status string

const (
	StatusPreregistered       Status = "preregistered"
	StatusReadyUnassigned     Status = "ready_unassigned"
	StatusPending             Status = "pending"
	StatusProvisioning        Status = "provisioning"
	StatusReady               Status = "ready"
	StatusReconfiguring       Status = "reconfiguring"
	StatusEnteringMaintenance Status = "entering_maintenance"
	StatusMaintenance         Status = "maintenance"
	StatusUnassigning         Status = "unassigning"
	StatusDeleting            Status = "deleting"
	StatusFailed              Status = "failed"
)

// Statuses lists every status in lifecycle order.
func Statuses() []Status {
	return []Status{
		StatusPreregistered, StatusReadyUnassigned, StatusPending, StatusProvisioning,
		StatusReady, StatusReconfiguring, StatusEnteringMaintenance, StatusMaintenance,
		StatusUnassigning, StatusDeleting, StatusFailed,
	}
}

// Connectivity is the online/offline dimension, apart from Status; empty
// until a heartbeat has been judged.
type Connectivity string

const (
	ConnectivityUnknown Connectivity = ""
	Online              Connectivity = "online"
	Offline             Connectivity = "offline"
)

// Hardware is the agent's inventory report.
type Hardware struct {
	CPUs     int    `json:"cpus"`
	RAMBytes uint64 `json:"ram_bytes"`
	Disks    []Disk `json:"disks,omitempty"`
	NICs     []NIC  `json:"nics,omitempty"`
}

// Disk is one block device.
type Disk struct {
	Name      string `json:"name"`
	SizeBytes uint64 `json:"size_bytes"`
}

// NIC is one network interface.
type NIC struct {
	Name string `json:"name"`
	MAC  string `json:"mac"`
}

// Reboot is the agent's reboot-required indicator.
type Reboot struct {
	Required bool   `json:"required,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Failure says why a machine is failed and what it was doing.
type Failure struct {
	Reason string `json:"reason"`
	During Status `json:"during"`
	// Step is the step that failed ("cordon", "drain", "wait_boot", …),
	// when the failure came from a rollout or an operation.
	Step string `json:"step,omitempty"`
}

// Deletion is an ongoing deletion.
type Deletion struct {
	Policy         DeletionPolicy `json:"policy"`
	Phase          DeletionPhase  `json:"phase"`
	Prepared       bool           `json:"prepared,omitempty"` // drain done: no longer abortable
	PreviousStatus Status         `json:"previous_status"`    // restored by an abort
	Reason         string         `json:"reason,omitempty"`   // why it failed
}

// DeletionPolicy says how much care a deletion takes.
type DeletionPolicy string

const (
	// DeletionGraceful cordons and drains first; the default.
	DeletionGraceful DeletionPolicy = "graceful"
	// DeletionUnsafe skips the drain but still removes the node.
	DeletionUnsafe DeletionPolicy = "unsafe"
	// DeletionForced removes the machine at once; clean-up is best effort.
	DeletionForced DeletionPolicy = "forced"
)

// DeletionPhase is how far a deletion got.
type DeletionPhase string

const (
	PhaseStarted   DeletionPhase = "started"   // cordon and drain under way; abortable
	PhaseCompleted DeletionPhase = "completed" // prepared (or unsafe): removing the node
	PhaseAborting  DeletionPhase = "aborting"  // uncordoning to go back to the previous status
	PhaseFailed    DeletionPhase = "failed"    // the workflow failed; retry, abort or force
)

// MaxReasonLen is the longest reason (a failure's, a reboot's) the
// registry keeps, in bytes.
const MaxReasonLen = fields.MaxReason

// NodeNameOf is the node name of a machine: its hostname, or its UUID
// when it has none (fields.NodeName, the rule the registry applies for
// Machine.NodeName).
func NodeNameOf(hostname, uuid string) string { return fields.NodeName(hostname, uuid) }

// ValidPoolName checks a pool name with the rule the registry applies to
// it (fields.PoolName), so that a caller can tell a malformed name from a
// missing pool before it asks.
func ValidPoolName(pool string) error { return fields.PoolName(pool) }
