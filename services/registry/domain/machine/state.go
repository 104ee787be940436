package machine

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields"
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

// Reboot is the agent's reboot-required indicator (Mirantis status.reboot).
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

// State is a machine as folded from its events. The zero value is a machine
// that does not exist (never seen, or deleted).
type State struct {
	UUID     string `json:"uuid"`
	Status   Status `json:"status"`
	Hostname string `json:"hostname,omitempty"`
	// NodeName is the name of the machine's Kubernetes Node: its hostname,
	// or its UUID when it has none (see NodeNameOf). It is derived, never
	// set by a command, and is the same in its Ignition, its Node and the API.
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

	// MaintenanceReturn is the status to go back to when maintenance ends.
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
	// boot, said it would ask again: until then (plus a grace) a machine
	// without an agent is alive in its boot loop, not offline.
	IPXERetryBy    time.Time `json:"ipxe_retry_by,omitzero"`
	LastIgnitionAt time.Time `json:"last_ignition_at,omitzero"`

	// ipxe is what IPXEBootDue decides on. It is derived from events like
	// the rest, but not shown: an API read or a snapshot leaves it zero,
	// which only means that the next boot is recorded.
	ipxe ipxeMark
}

// Exists reports whether the machine exists.
func (s *State) Exists() bool { return s.Status != "" }

// InMaintenance reports whether maintenance is on (Mirantis maintenance flag).
func (s *State) InMaintenance() bool {
	return s.Status == StatusEnteringMaintenance || s.Status == StatusMaintenance
}

// hasNode reports whether the machine may be a node in a cluster, i.e.
// whether a graceful deletion has anything to drain.
func (s *State) hasNode() bool {
	st := s.Status
	if s.InMaintenance() {
		st = s.MaintenanceReturn
	}
	switch st {
	case "", StatusPreregistered, StatusReadyUnassigned, StatusPending:
		return false
	}
	return true
}

// Clone returns a deep copy.
func (s State) Clone() State {
	c := s
	c.Labels = maps.Clone(s.Labels)
	if s.Failure != nil {
		f := *s.Failure
		c.Failure = &f
	}
	if s.Deletion != nil {
		d := *s.Deletion
		c.Deletion = &d
	}
	if s.Hardware != nil {
		h := s.Hardware.clone()
		c.Hardware = &h
	}
	return c
}

func (h Hardware) clone() Hardware {
	h.Disks = slices.Clone(h.Disks)
	h.NICs = slices.Clone(h.NICs)
	return h
}

func (h Hardware) equal(o Hardware) bool {
	return h.CPUs == o.CPUs && h.RAMBytes == o.RAMBytes && slices.Equal(h.Disks, o.Disks) && slices.Equal(h.NICs, o.NICs)
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func cloneLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// setStatus moves to st. The failure is kept only while the machine is
// failed or parked from failed (maintenance, a deletion that may abort).
func (s *State) setStatus(st Status) {
	s.Status = st
	switch st {
	case StatusFailed, StatusEnteringMaintenance, StatusMaintenance, StatusDeleting:
	default:
		s.Failure = nil
	}
}

// Apply folds one event into the state (evolve). It is deterministic and
// total: unknown events and nil pointers are ignored, and it never reads the
// clock. It never keeps references to the event's maps or slices.
func (s *State) Apply(event any) {
	if v := reflect.ValueOf(event); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		event = v.Elem().Interface()
	}
	if !s.Exists() {
		switch event.(type) {
		case Preregistered, Registered:
		default:
			return // nothing happens to a machine that does not exist
		}
	}
	switch e := event.(type) {
	case Preregistered:
		*s = State{
			UUID: e.UUID, Status: StatusPreregistered, Hostname: e.Hostname, Labels: cloneLabels(e.Labels),
			Pool: e.Pool, UpgradeIndex: e.UpgradeIndex, ControlPlane: e.ControlPlane,
		}
	case Registered:
		if s.Status != StatusPreregistered {
			*s = State{UUID: e.UUID}
		}
		s.MAC, s.EnrollmentTokenID = e.MAC, e.EnrollmentTokenID
		s.RegisteredAt, s.LastIPXEBootAt = utc(e.BootedAt), utc(e.BootedAt)
		if s.Pool != "" {
			s.setStatus(StatusPending)
		} else {
			s.setStatus(StatusReadyUnassigned)
		}
	case HostnameChanged:
		s.Hostname = e.Hostname
	case LabelsChanged:
		s.Labels = cloneLabels(e.Labels)
	case UpgradeIndexChanged:
		s.UpgradeIndex = e.UpgradeIndex
	case ControlPlaneChanged:
		s.ControlPlane = e.ControlPlane
	case AssignedToPool:
		s.Pool = e.Pool
		if s.Status == StatusReadyUnassigned {
			s.setStatus(StatusPending)
		}
	case UnassignStarted:
		s.setStatus(StatusUnassigning)
	case Unassigned:
		s.Pool, s.TargetRevision = "", 0
		if s.Status != StatusPreregistered {
			s.setStatus(StatusReadyUnassigned)
		}
	case ForceUnassigned:
		s.Pool, s.TargetRevision, s.MaintenanceReturn = "", 0, ""
		s.setStatus(StatusReadyUnassigned)
	case TargetRevisionSet:
		s.TargetRevision = e.Revision
		switch s.Status {
		case StatusPending:
			s.setStatus(StatusProvisioning)
		case StatusReady:
			s.setStatus(StatusReconfiguring)
		case StatusFailed:
			s.setStatus(retryStatus(s.Failure))
		}
	case BecameReady:
		s.TargetRevision = e.Revision
		s.setStatus(StatusReady)
	case Failed:
		s.MaintenanceReturn = ""
		s.Failure = &Failure{Reason: e.Reason, During: e.During, Step: e.Step}
		s.setStatus(StatusFailed)
	case MaintenanceRequested:
		s.MaintenanceReturn = s.Status
		s.setStatus(StatusEnteringMaintenance)
	case MaintenanceEntered:
		if s.Status != StatusEnteringMaintenance {
			s.MaintenanceReturn = s.Status
		}
		s.setStatus(StatusMaintenance)
	case MaintenanceExited:
		back := s.MaintenanceReturn
		if back == "" { // defensive: a log written before MaintenanceReturn existed
			back = StatusReady
			if s.Pool == "" {
				back = StatusReadyUnassigned
			}
		}
		s.MaintenanceReturn = ""
		s.setStatus(back)
	case DeletionStarted:
		if s.Deletion == nil {
			s.Deletion = &Deletion{PreviousStatus: s.Status}
		}
		d := *s.Deletion // copy on write: Decide's callers may share the pointer
		d.Policy, d.Reason = e.Policy, ""
		d.Phase = PhaseStarted
		if e.Policy != DeletionGraceful {
			d.Phase = PhaseCompleted
		}
		s.Deletion = &d
		s.setStatus(StatusDeleting)
	case DeletionPrepared:
		s.updateDeletion(func(d *Deletion) { d.Phase, d.Prepared = PhaseCompleted, true })
	case DeletionAborting:
		s.updateDeletion(func(d *Deletion) { d.Phase, d.Reason = PhaseAborting, "" })
	case DeletionFailed:
		s.updateDeletion(func(d *Deletion) { d.Phase, d.Reason = PhaseFailed, e.Reason })
	case DeletionAborted:
		if s.Deletion != nil {
			prev := s.Deletion.PreviousStatus
			s.Deletion = nil
			s.setStatus(prev)
		}
	case Deleted:
		*s = State{}
	case IPXEBooted:
		s.LastIPXEBootAt = utc(e.At)
		if !e.RetryBy.IsZero() {
			s.IPXERetryBy = utc(e.RetryBy)
		}
	case IgnitionCompleted:
		s.LastIgnitionAt = utc(e.At)
	case RevisionBooted:
		s.CurrentRevision, s.CurrentRevisionAt = e.Revision, utc(e.At)
	case HardwareReported:
		h := e.Hardware.clone()
		s.Hardware, s.HardwareReportedAt = &h, utc(e.At)
	case RebootRequiredChanged:
		s.Reboot = Reboot{Required: e.Required, Reason: e.Reason}
	case WentOffline:
		s.Connectivity, s.ConnectivitySince = Offline, utc(e.LastSeenAt)
	case CameOnline:
		s.Connectivity, s.ConnectivitySince = Online, utc(e.LastSeenAt)
	}
	if s.Exists() {
		s.NodeName = NodeNameOf(s.Hostname, s.UUID)
		s.ipxe = markIPXE(event)
	}
}

func (s *State) updateDeletion(f func(*Deletion)) {
	if s.Deletion == nil {
		return
	}
	d := *s.Deletion
	f(&d)
	s.Deletion = &d
}

// retryStatus is where a failed machine goes when a rollout targets it
// again: if it failed before ever joining, it is provisioned; otherwise it
// may carry workloads and is reconfigured (cordon, drain, reboot).
func retryStatus(f *Failure) Status {
	if f != nil && (f.During == StatusPending || f.During == StatusProvisioning) {
		return StatusProvisioning
	}
	return StatusReconfiguring
}

// NodeNameOf is the node name of a machine: its hostname, or, when it has
// none, its UUID (fields.NodeName: the one rule, which boot and rollout
// use through the registry's api package).
func NodeNameOf(hostname, uuid string) string { return fields.NodeName(hostname, uuid) }
