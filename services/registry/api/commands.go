package api

import "time"

// MachineCommand is a command for one machine, as another service sends it
// with Client.Machine. Each is plain data: its CommandType names the
// subject (see MachineSubject) and its JSON is the request's command; the
// registry decodes that JSON into its own command and decides on it. The
// registry's tests check that each encodes exactly as the registry's own.
type MachineCommand interface {
	CommandType() string
}

// --- the gateway's, on an operator's behalf ---

// PreRegister describes a machine before its first boot; when it boots it
// takes over this configuration.
type PreRegister struct {
	UUID         string            `json:"uuid"`
	Hostname     string            `json:"hostname,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	UpgradeIndex int               `json:"upgrade_index,omitempty"`
	ControlPlane bool              `json:"control_plane,omitempty"`
}

type SetHostname struct {
	Hostname string `json:"hostname"`
}

// SetLabels replaces all labels.
type SetLabels struct {
	Labels map[string]string `json:"labels"`
}

// SetUpgradeIndex sets the rollout order within a pool; 0 unsets it.
type SetUpgradeIndex struct {
	UpgradeIndex int `json:"upgrade_index"`
}

// SetControlPlane marks machines that host control-plane nodes.
type SetControlPlane struct {
	ControlPlane bool `json:"control_plane"`
}

type AssignToPool struct {
	Pool string `json:"pool"`
}

// Unassign takes the machine out of its pool after a drain.
type Unassign struct{}

// ForceUnassign takes the machine out of its pool at once, without a drain.
type ForceUnassign struct{}

// SetMaintenance turns maintenance mode on (cordon, drain) or off.
type SetMaintenance struct {
	Enabled bool `json:"enabled"`
}

// Delete deletes the machine; an empty policy means graceful.
type Delete struct {
	Policy DeletionPolicy `json:"policy,omitempty"`
}

// AbortDeletion aborts a graceful deletion whose preparation still runs.
type AbortDeletion struct{}

// --- the boot service's and the agent's reports ---

type RecordIPXEBoot struct {
	At time.Time `json:"at"`
	// RetryIn is the delay the boot script tells the firmware to wait
	// before it asks again (0: none given).
	RetryIn time.Duration `json:"retry_in,omitempty"`
}

type RecordIgnition struct {
	At time.Time `json:"at"`
}

type ReportBootedRevision struct {
	Revision uint64    `json:"revision"`
	At       time.Time `json:"at"`
}

type ReportHardware struct {
	Hardware Hardware  `json:"hardware"`
	At       time.Time `json:"at"`
}

type ReportRebootRequired struct {
	Required bool   `json:"required"`
	Reason   string `json:"reason,omitempty"`
}

// ReportAgent is an agent's report in one command, each part optional:
// the registry decides the hardware, then the reboot indicator, then the
// booted revision, as their own commands would, and takes all their events
// or none. A refusal names the bad fields of every part by their path
// ("hardware.hardware.cpus", "booted_revision.at"), before what the
// machine's state refuses.
type ReportAgent struct {
	Hardware       *ReportHardware       `json:"hardware,omitempty"`
	RebootRequired *ReportRebootRequired `json:"reboot_required,omitempty"`
	BootedRevision *ReportBootedRevision `json:"booted_revision,omitempty"`
}

// CheckConnectivity turns a heartbeat time (kept outside the log) into an
// online/offline event when one is due.
type CheckConnectivity struct {
	LastHeartbeat time.Time     `json:"last_heartbeat"`
	Silence       time.Duration `json:"silence"`
}

// --- the rollout service's reports ---

// SetTargetRevision: a rollout targets the machine with a revision.
type SetTargetRevision struct {
	Revision uint64 `json:"revision"`
}

// MarkReady: the node joined, is Ready and uncordoned at Revision.
type MarkReady struct {
	Revision uint64 `json:"revision"`
}

// MarkFailed: the step in progress failed or timed out.
type MarkFailed struct {
	Reason string `json:"reason"`
	// Step is the step that failed, for the record (optional).
	Step string `json:"step,omitempty"`
}

type CompleteUnassign struct{}
type CompleteMaintenanceEntry struct{}
type CompleteDeletionPreparation struct{}

type FailDeletion struct {
	Reason string `json:"reason"`
}

type CompleteDeletionAbort struct{}
type CompleteDeletion struct{}

func (PreRegister) CommandType() string              { return "machine.preregister" }
func (RecordIPXEBoot) CommandType() string           { return "machine.record_ipxe_boot" }
func (RecordIgnition) CommandType() string           { return "machine.record_ignition" }
func (SetHostname) CommandType() string              { return "machine.set_hostname" }
func (SetLabels) CommandType() string                { return "machine.set_labels" }
func (SetUpgradeIndex) CommandType() string          { return "machine.set_upgrade_index" }
func (SetControlPlane) CommandType() string          { return "machine.set_control_plane" }
func (AssignToPool) CommandType() string             { return "machine.assign_to_pool" }
func (Unassign) CommandType() string                 { return "machine.unassign" }
func (ForceUnassign) CommandType() string            { return "machine.force_unassign" }
func (SetMaintenance) CommandType() string           { return "machine.set_maintenance" }
func (Delete) CommandType() string                   { return "machine.delete" }
func (AbortDeletion) CommandType() string            { return "machine.abort_deletion" }
func (ReportBootedRevision) CommandType() string     { return "machine.report_booted_revision" }
func (ReportHardware) CommandType() string           { return "machine.report_hardware" }
func (ReportRebootRequired) CommandType() string     { return "machine.report_reboot_required" }
func (ReportAgent) CommandType() string              { return "machine.report_agent" }
func (CheckConnectivity) CommandType() string        { return "machine.check_connectivity" }
func (SetTargetRevision) CommandType() string        { return "machine.set_target_revision" }
func (MarkReady) CommandType() string                { return "machine.mark_ready" }
func (MarkFailed) CommandType() string               { return "machine.mark_failed" }
func (CompleteUnassign) CommandType() string         { return "machine.complete_unassign" }
func (CompleteMaintenanceEntry) CommandType() string { return "machine.complete_maintenance_entry" }
func (CompleteDeletionPreparation) CommandType() string {
	return "machine.complete_deletion_preparation"
}
func (FailDeletion) CommandType() string          { return "machine.fail_deletion" }
func (CompleteDeletionAbort) CommandType() string { return "machine.complete_deletion_abort" }
func (CompleteDeletion) CommandType() string      { return "machine.complete_deletion" }

// MachineCommands returns a zero value of every machine command the
// registry serves on NATS.
func MachineCommands() []MachineCommand {
	return []MachineCommand{
		PreRegister{}, RecordIPXEBoot{}, RecordIgnition{},
		SetHostname{}, SetLabels{}, SetUpgradeIndex{}, SetControlPlane{},
		AssignToPool{}, Unassign{}, ForceUnassign{}, SetMaintenance{},
		Delete{}, AbortDeletion{},
		ReportBootedRevision{}, ReportHardware{}, ReportRebootRequired{}, ReportAgent{}, CheckConnectivity{},
		SetTargetRevision{}, MarkReady{}, MarkFailed{},
		CompleteUnassign{}, CompleteMaintenanceEntry{},
		CompleteDeletionPreparation{}, FailDeletion{}, CompleteDeletionAbort{}, CompleteDeletion{},
	}
}
