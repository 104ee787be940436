package machine

// Status is where a machine is in its lifecycle. docs/machine-states.md is
// the reference: every state, every command, and the events between them.
type Status string

const (
	StatusPreregistered       Status = "preregistered"        // known by UUID, never booted (Mirantis: Provision)
	StatusReadyUnassigned     Status = "ready_unassigned"     // booted and registered, in no pool (meltcloud)
	StatusPending             Status = "pending"              // in a pool, waiting for its first revision (Mirantis: Pending)
	StatusProvisioning        Status = "provisioning"         // booting into its first revision and joining (Mirantis: Prepare, Deploy)
	StatusReady               Status = "ready"                // joined and Ready at its target revision (Mirantis: Ready)
	StatusReconfiguring       Status = "reconfiguring"        // a rollout moves it to a new revision (Mirantis: Reconfigure)
	StatusEnteringMaintenance Status = "entering_maintenance" // being cordoned and drained for maintenance
	StatusMaintenance         Status = "maintenance"          // cordoned and drained (Mirantis: Maintenance)
	StatusUnassigning         Status = "unassigning"          // being drained before it leaves its pool
	StatusDeleting            Status = "deleting"             // see Deletion for policy and phase
	StatusFailed              Status = "failed"               // a step failed; see Failure
)

// Statuses lists every status in lifecycle order.
func Statuses() []Status {
	return []Status{
		StatusPreregistered, StatusReadyUnassigned, StatusPending, StatusProvisioning,
		StatusReady, StatusReconfiguring, StatusEnteringMaintenance, StatusMaintenance,
		StatusUnassigning, StatusDeleting, StatusFailed,
	}
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, k := range Statuses() {
		if s == k {
			return true
		}
	}
	return false
}

// DeletionPolicy says how much care a deletion takes (Mirantis deletionPolicy).
type DeletionPolicy string

const (
	// DeletionGraceful cordons and drains first; it can be aborted until the
	// preparation completes. anvil's default (Mirantis defaults to unsafe; a
	// platform team would rather not lose workloads by omission).
	DeletionGraceful DeletionPolicy = "graceful"
	// DeletionUnsafe skips the drain but still waits for the node to be
	// removed from its cluster.
	DeletionUnsafe DeletionPolicy = "unsafe"
	// DeletionForced removes the machine at once, even if clean-up is stuck;
	// clean-up is best effort and may need a human.
	DeletionForced DeletionPolicy = "forced"
)

// DeletionPhase is Mirantis's prepareDeletionPhase.
type DeletionPhase string

const (
	PhaseStarted   DeletionPhase = "started"   // cordon and drain under way; abortable
	PhaseCompleted DeletionPhase = "completed" // prepared (or unsafe): removing the node
	PhaseAborting  DeletionPhase = "aborting"  // uncordoning to go back to the previous status
	PhaseFailed    DeletionPhase = "failed"    // the workflow failed; retry, abort or force
)

// Connectivity is the online/offline dimension, kept apart from Status: a
// machine in maintenance may well be powered off, and a rollout needs both
// facts. The zero value means no heartbeat has been judged yet.
type Connectivity string

const (
	ConnectivityUnknown Connectivity = ""
	Online              Connectivity = "online"
	Offline             Connectivity = "offline"
)
