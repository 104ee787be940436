package machine

import (
	"fmt"
	"maps"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// Command is any machine command; Decide runs it.
type Command interface {
	CommandType() string
	decide(s *State, now time.Time) ([]any, error)
}

// Decide validates cmd, checks it against the machine's state and returns
// the events it causes: none when it is already done (idempotent), a
// validation error naming every bad field, NotFound for a machine that does
// not exist, or a Conflict saying why the state forbids it. It never
// mutates s.
func Decide(s State, cmd Command, now time.Time) ([]any, error) {
	if cmd == nil {
		return nil, errs.Internal("nil machine command")
	}
	return cmd.decide(&s, now)
}

// CommandTypes returns a zero value of every command, for registering them
// with the command bus.
func CommandTypes() []any {
	return []any{
		PreRegister{}, Register{}, RecordIPXEBoot{}, RecordIgnition{},
		SetHostname{}, SetLabels{}, SetUpgradeIndex{}, SetControlPlane{},
		AssignToPool{}, Unassign{}, ForceUnassign{}, SetMaintenance{},
		Delete{}, AbortDeletion{},
		ReportBootedRevision{}, ReportHardware{}, ReportRebootRequired{}, ReportAgent{}, CheckConnectivity{},
		SetTargetRevision{}, MarkReady{}, MarkFailed{},
		CompleteUnassign{}, CompleteMaintenanceEntry{},
		CompleteDeletionPreparation{}, FailDeletion{}, CompleteDeletionAbort{}, CompleteDeletion{},
	}
}

// --- operator commands ---

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

// SetControlPlane marks machines that host control-plane nodes; they roll
// first.
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

// AbortDeletion aborts a graceful deletion whose preparation is still running.
type AbortDeletion struct{}

// --- boot service and agent reports ---

// Register is a machine's self-registration, sent by the boot service after
// it verified the enrollment token.
type Register struct {
	UUID              string    `json:"uuid"`
	MAC               string    `json:"mac"`
	EnrollmentTokenID string    `json:"enrollment_token_id"`
	At                time.Time `json:"at"`
}

type RecordIPXEBoot struct {
	At time.Time `json:"at"`
	// RetryIn is the delay the boot script tells the firmware to wait
	// before it asks again (0: none given).
	RetryIn time.Duration `json:"retry_in,omitempty"`
	// RecordEvery, when positive, records a boot that changes nothing at
	// most once per RecordEvery (see IPXEBootDue). The registry sets it
	// from its setting; it is not part of the command's JSON.
	RecordEvery time.Duration `json:"-"`
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

// ReportAgent is an agent's report in one command: each part that is set
// is decided as its own command would be, in this order, on the state the
// part before left, and the registry takes their events all together or
// none of them; bad fields are named for every part ("hardware.at"). One
// command instead of three: each is a round trip to the
// registry and a decision on the machine, made for every machine that
// boots.
type ReportAgent struct {
	Hardware       *ReportHardware       `json:"hardware,omitempty"`
	RebootRequired *ReportRebootRequired `json:"reboot_required,omitempty"`
	BootedRevision *ReportBootedRevision `json:"booted_revision,omitempty"`
}

// CheckConnectivity turns a heartbeat time (kept outside the log) into an
// online/offline event when one is due; see ConnectivityTransition.
type CheckConnectivity struct {
	LastHeartbeat time.Time     `json:"last_heartbeat"`
	Silence       time.Duration `json:"silence"`
}

// --- rollout service reports ---

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
func (Register) CommandType() string                 { return "machine.register" }
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

// --- refusals ---

// describe says what the machine is doing, for Conflict messages.
func (s *State) describe() string {
	switch s.Status {
	case StatusPreregistered:
		return "pre-registered and has not booted yet"
	case StatusReadyUnassigned:
		return "not in a pool"
	case StatusPending:
		return fmt.Sprintf("waiting for its first revision in pool %s", s.Pool)
	case StatusProvisioning:
		return fmt.Sprintf("being provisioned into pool %s at revision %d", s.Pool, s.TargetRevision)
	case StatusReady:
		return fmt.Sprintf("ready in pool %s at revision %d", s.Pool, s.TargetRevision)
	case StatusReconfiguring:
		return fmt.Sprintf("being reconfigured to revision %d in pool %s", s.TargetRevision, s.Pool)
	case StatusEnteringMaintenance:
		return "entering maintenance (its node is being drained)"
	case StatusMaintenance:
		return "in maintenance"
	case StatusUnassigning:
		return fmt.Sprintf("leaving pool %s (its node is being drained)", s.Pool)
	case StatusFailed:
		if s.Failure != nil {
			return fmt.Sprintf("failed while %s: %s", s.Failure.During, s.Failure.Reason)
		}
		return "failed"
	case StatusDeleting:
		if d := s.Deletion; d != nil {
			if d.Phase == PhaseFailed {
				return fmt.Sprintf("deleting (policy %s), and the deletion failed: %s", d.Policy, d.Reason)
			}
			return fmt.Sprintf("deleting (policy %s, phase %s)", d.Policy, d.Phase)
		}
		return "deleting"
	}
	return string(s.Status)
}

// refuse builds the Conflict for a command the state forbids: what the
// machine is doing, what cannot happen, and (when there is one) what to do.
func (s *State) refuse(action, hint string) error {
	msg := fmt.Sprintf("machine %s is %s; it cannot %s", s.UUID, s.describe(), action)
	if hint != "" {
		msg += "; " + hint
	}
	return errs.Conflict("%s", msg)
}

func notFound() error { return errs.NotFound("machine does not exist") }

// existing refuses commands on a machine that does not exist.
func existing(s *State) error {
	if !s.Exists() {
		return notFound()
	}
	return nil
}

// changeable refuses configuration changes to missing or deleting machines.
func changeable(s *State, action string) error {
	if err := existing(s); err != nil {
		return err
	}
	if s.Status == StatusDeleting {
		return s.refuse(action, "abort the deletion first")
	}
	return nil
}

// booted refuses agent and boot reports for machines that never registered.
func booted(s *State, action string) error {
	if err := existing(s); err != nil {
		return err
	}
	if s.Status == StatusPreregistered {
		return s.refuse(action, "it must self-register first")
	}
	return nil
}

func requireAt(f *errs.Fields, at time.Time) {
	if at.IsZero() {
		f.Add("at", "is required")
	}
}

func validRevision(f *errs.Fields, rev uint64) {
	if rev == 0 {
		f.Add("revision", "must be a positive revision number")
	}
}

func one(e any) ([]any, error) { return []any{e}, nil }

// --- registration ---

func (c PreRegister) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	id, err := ParseUUID(c.UUID)
	f.Merge("", err)
	if c.Hostname != "" {
		validateHostname(&f, "hostname", c.Hostname)
	}
	validateLabels(&f, "labels", c.Labels)
	if c.Pool != "" {
		validatePool(&f, "pool", c.Pool)
	}
	if c.UpgradeIndex < 0 || c.UpgradeIndex > 1<<30 {
		f.Add("upgrade_index", "must be a positive number, or 0 for none")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	ev := Preregistered{UUID: id, Hostname: c.Hostname, Labels: cloneLabels(c.Labels), Pool: c.Pool, UpgradeIndex: c.UpgradeIndex, ControlPlane: c.ControlPlane}
	if !s.Exists() {
		return one(ev)
	}
	if s.UUID != id {
		return nil, errs.Internal("command for machine %s decided against machine %s", id, s.UUID)
	}
	if s.Status == StatusPreregistered && s.Hostname == ev.Hostname && maps.Equal(s.Labels, ev.Labels) &&
		s.Pool == ev.Pool && s.UpgradeIndex == ev.UpgradeIndex && s.ControlPlane == ev.ControlPlane {
		return nil, nil
	}
	return nil, s.refuse("be pre-registered again", "change its hostname, labels or pool instead")
}

func (c Register) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	id, err := ParseUUID(c.UUID)
	f.Merge("", err)
	mac, err := normalizeMAC(c.MAC)
	if err != nil {
		f.Add("mac", "%v", err)
	}
	if err := token.ValidID(c.EnrollmentTokenID); err != nil {
		f.Add("enrollment_token_id", "%v", err)
	}
	requireAt(&f, c.At)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if s.Exists() && s.UUID != id {
		return nil, errs.Internal("command for machine %s decided against machine %s", id, s.UUID)
	}
	if s.Exists() && s.Status != StatusPreregistered {
		return nil, nil // every later boot: already registered
	}
	return one(Registered{UUID: id, MAC: mac, EnrollmentTokenID: c.EnrollmentTokenID, BootedAt: c.At.UTC()})
}

func (c RecordIPXEBoot) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	requireAt(&f, c.At)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "record an iPXE boot"); err != nil {
		return nil, err
	}
	if c.RetryIn < 0 || c.RetryIn > 24*time.Hour {
		return nil, errs.Invalid("retry_in", "must be between 0 and 24h, got %s", c.RetryIn)
	}
	var retryBy time.Time
	if c.RetryIn > 0 {
		retryBy = c.At.Add(c.RetryIn).UTC()
	}
	if c.At.Before(s.LastIPXEBootAt) || (c.At.Equal(s.LastIPXEBootAt) && !retryBy.After(s.IPXERetryBy)) {
		return nil, nil
	}
	if !IPXEBootDue(*s, c.At, c.RetryIn, c.RecordEvery) {
		return nil, nil // a retry that changes nothing: its time is kept outside the log
	}
	return one(IPXEBooted{At: c.At.UTC(), RetryBy: retryBy})
}

func (c RecordIgnition) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	requireAt(&f, c.At)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "record an Ignition run"); err != nil {
		return nil, err
	}
	if !c.At.After(s.LastIgnitionAt) {
		return nil, nil
	}
	return one(IgnitionCompleted{At: c.At.UTC()})
}

// --- configuration ---

func (c SetHostname) decide(s *State, _ time.Time) ([]any, error) {
	if err := ValidateHostname(c.Hostname); err != nil {
		return nil, err
	}
	if err := changeable(s, "be renamed"); err != nil {
		return nil, err
	}
	if s.Hostname == c.Hostname {
		return nil, nil
	}
	return one(HostnameChanged{Hostname: c.Hostname})
}

func (c SetLabels) decide(s *State, _ time.Time) ([]any, error) {
	if err := ValidateLabels(c.Labels); err != nil {
		return nil, err
	}
	if err := changeable(s, "be relabelled"); err != nil {
		return nil, err
	}
	if maps.Equal(s.Labels, c.Labels) {
		return nil, nil
	}
	return one(LabelsChanged{Labels: cloneLabels(c.Labels)})
}

func (c SetUpgradeIndex) decide(s *State, _ time.Time) ([]any, error) {
	if c.UpgradeIndex < 0 || c.UpgradeIndex > 1<<30 {
		return nil, errs.Invalid("upgrade_index", "must be a positive number, or 0 for none")
	}
	if err := changeable(s, "change its upgrade index"); err != nil {
		return nil, err
	}
	if s.UpgradeIndex == c.UpgradeIndex {
		return nil, nil
	}
	return one(UpgradeIndexChanged{UpgradeIndex: c.UpgradeIndex})
}

func (c SetControlPlane) decide(s *State, _ time.Time) ([]any, error) {
	if err := changeable(s, "change its control-plane flag"); err != nil {
		return nil, err
	}
	if s.ControlPlane == c.ControlPlane {
		return nil, nil
	}
	return one(ControlPlaneChanged{ControlPlane: c.ControlPlane})
}

// --- pools ---

func (c AssignToPool) decide(s *State, _ time.Time) ([]any, error) {
	if err := ValidatePool(c.Pool); err != nil {
		return nil, err
	}
	if err := changeable(s, "be assigned to a pool"); err != nil {
		return nil, err
	}
	if s.Pool == c.Pool && s.Status != StatusUnassigning {
		return nil, nil
	}
	switch s.Status {
	case StatusPreregistered, StatusReadyUnassigned, StatusPending:
		// Nothing runs on it yet, so it can change pools freely.
		return one(AssignedToPool{Pool: c.Pool})
	case StatusUnassigning:
		return nil, s.refuse("be assigned to a pool", "wait until it has left, then assign it")
	}
	if s.Pool == "" { // in maintenance without a pool
		return nil, s.refuse("be assigned to a pool", "turn maintenance off first")
	}
	return nil, s.refuse("be assigned to pool "+c.Pool, "unassign it first")
}

func (Unassign) decide(s *State, _ time.Time) ([]any, error) {
	if err := changeable(s, "be unassigned"); err != nil {
		return nil, err
	}
	if s.Pool == "" || s.Status == StatusUnassigning {
		return nil, nil
	}
	switch s.Status {
	case StatusPreregistered, StatusPending:
		return one(Unassigned{Pool: s.Pool}) // nothing to drain
	case StatusEnteringMaintenance, StatusMaintenance:
		return nil, s.refuse("be unassigned", "turn maintenance off first, or force-unassign it")
	}
	return one(UnassignStarted{Pool: s.Pool})
}

func (ForceUnassign) decide(s *State, _ time.Time) ([]any, error) {
	if err := changeable(s, "be unassigned"); err != nil {
		return nil, err
	}
	if s.Pool == "" {
		return nil, nil
	}
	if s.Status == StatusPreregistered {
		return one(Unassigned{Pool: s.Pool})
	}
	return one(ForceUnassigned{Pool: s.Pool})
}

// --- maintenance ---

func (c SetMaintenance) decide(s *State, _ time.Time) ([]any, error) {
	action := "leave maintenance"
	if c.Enabled {
		action = "enter maintenance"
	}
	if err := changeable(s, action); err != nil {
		return nil, err
	}
	if !c.Enabled {
		if s.InMaintenance() {
			return one(MaintenanceExited{})
		}
		return nil, nil
	}
	switch s.Status {
	case StatusEnteringMaintenance, StatusMaintenance:
		return nil, nil
	case StatusReadyUnassigned, StatusPending:
		return one(MaintenanceEntered{}) // no node to drain
	case StatusReady, StatusFailed:
		return one(MaintenanceRequested{})
	case StatusPreregistered:
		return nil, s.refuse(action, "")
	case StatusUnassigning:
		return nil, s.refuse(action, "wait until it has left the pool")
	}
	return nil, s.refuse(action, "wait for the rollout step to finish")
}

// --- deletion ---

func (c Delete) decide(s *State, _ time.Time) ([]any, error) {
	policy := c.Policy
	if policy == "" {
		policy = DeletionGraceful
	}
	switch policy {
	case DeletionGraceful, DeletionUnsafe, DeletionForced:
	default:
		return nil, errs.Invalid("policy", "must be graceful, unsafe or forced")
	}
	if err := existing(s); err != nil {
		return nil, err
	}
	if policy == DeletionForced {
		return one(Deleted{Policy: policy})
	}
	if d := s.Deletion; s.Status == StatusDeleting && d != nil {
		switch {
		case d.Phase == PhaseCompleted:
			return nil, nil // already removing the node
		case policy == DeletionUnsafe:
			return one(DeletionStarted{Policy: policy}) // escalate: skip the rest
		case d.Phase == PhaseStarted:
			return nil, nil
		case d.Phase == PhaseAborting:
			return nil, s.refuse("be deleted gracefully", "wait for the abort to finish, or delete it with policy unsafe or forced")
		}
		return one(DeletionStarted{Policy: policy}) // retry after a failure
	}
	if !s.hasNode() {
		return one(Deleted{Policy: policy})
	}
	return one(DeletionStarted{Policy: policy})
}

func (AbortDeletion) decide(s *State, _ time.Time) ([]any, error) {
	if err := existing(s); err != nil {
		return nil, err
	}
	d := s.Deletion
	switch {
	case s.Status != StatusDeleting || d == nil:
		return nil, s.refuse("have its deletion aborted", "it is not being deleted")
	case d.Phase == PhaseAborting:
		return nil, nil
	case d.Policy != DeletionGraceful:
		return nil, s.refuse("have its deletion aborted", "only graceful deletions can be aborted")
	case d.Prepared:
		return nil, s.refuse("have its deletion aborted", "its preparation has completed")
	}
	return one(DeletionAborting{})
}

// --- agent reports ---

func (c ReportBootedRevision) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validRevision(&f, c.Revision)
	requireAt(&f, c.At)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "report a booted revision"); err != nil {
		return nil, err
	}
	if c.Revision == s.CurrentRevision || c.At.Before(s.CurrentRevisionAt) {
		return nil, nil // unchanged, or an older report arriving late
	}
	return one(RevisionBooted{Revision: c.Revision, At: c.At.UTC()})
}

func (c ReportHardware) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	hw := normalizeHardware(&f, "hardware", c.Hardware)
	requireAt(&f, c.At)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "report hardware"); err != nil {
		return nil, err
	}
	if c.At.Before(s.HardwareReportedAt) || (s.Hardware != nil && s.Hardware.equal(hw)) {
		return nil, nil
	}
	return one(HardwareReported{Hardware: hw, At: c.At.UTC()})
}

func (c ReportRebootRequired) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validateText(&f, "reason", c.Reason, false, MaxReasonLen)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "report a reboot indicator"); err != nil {
		return nil, err
	}
	r := Reboot{Required: c.Required, Reason: c.Reason}
	if !r.Required {
		r.Reason = "" // a reason only explains a required reboot
	}
	if s.Reboot == r {
		return nil, nil
	}
	return one(RebootRequiredChanged{Required: r.Required, Reason: r.Reason})
}

func (c ReportAgent) decide(s *State, now time.Time) ([]any, error) {
	type part struct {
		field string
		cmd   Command
	}
	var parts []part
	if c.Hardware != nil {
		parts = append(parts, part{"hardware", *c.Hardware})
	}
	if c.RebootRequired != nil {
		parts = append(parts, part{"reboot_required", *c.RebootRequired})
	}
	if c.BootedRevision != nil {
		parts = append(parts, part{"booted_revision", *c.BootedRevision})
	}
	if len(parts) == 0 {
		return nil, errs.Invalid("report", "names none of hardware, reboot_required and booted_revision")
	}
	// Every part is decided, so that a refusal names every bad field of
	// the report; bad fields come before what the state refuses, as for
	// any one command.
	var f errs.Fields
	var refused error
	next := s.Clone()
	var all []any
	for _, p := range parts {
		evs, err := p.cmd.decide(&next, now)
		switch {
		case errs.KindOf(err) == errs.KindValidation:
			f.Merge(p.field, err)
			continue
		case err != nil:
			if refused == nil {
				refused = err
			}
			continue
		}
		for _, e := range evs {
			next.Apply(e)
		}
		all = append(all, evs...)
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return all, nil
}

func (c CheckConnectivity) decide(s *State, now time.Time) ([]any, error) {
	var f errs.Fields
	if c.Silence <= 0 {
		f.Add("silence", "must be a positive duration")
	}
	if c.LastHeartbeat.IsZero() {
		f.Add("last_heartbeat", "is required")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := booted(s, "go online or offline"); err != nil {
		return nil, err
	}
	if ev, due := ConnectivityTransition(*s, c.LastHeartbeat, c.Silence, now); due {
		return one(ev)
	}
	return nil, nil
}

// --- rollout reports ---

func (c SetTargetRevision) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validRevision(&f, c.Revision)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := changeable(s, "be targeted by a rollout"); err != nil {
		return nil, err
	}
	action := fmt.Sprintf("be targeted with revision %d", c.Revision)
	switch s.Status {
	case StatusPending, StatusFailed:
		return one(TargetRevisionSet{Revision: c.Revision})
	case StatusProvisioning, StatusReconfiguring, StatusReady:
		if c.Revision == s.TargetRevision {
			return nil, nil
		}
		return one(TargetRevisionSet{Revision: c.Revision})
	case StatusReadyUnassigned:
		return nil, s.refuse(action, "assign it to a pool first")
	case StatusEnteringMaintenance, StatusMaintenance:
		return nil, s.refuse(action, "turn maintenance off first")
	}
	return nil, s.refuse(action, "")
}

func (c MarkReady) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validRevision(&f, c.Revision)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := existing(s); err != nil {
		return nil, err
	}
	action := fmt.Sprintf("be marked ready at revision %d", c.Revision)
	switch s.Status {
	case StatusProvisioning, StatusReconfiguring, StatusFailed, StatusReady:
		if c.Revision != s.TargetRevision {
			return nil, s.refuse(action, fmt.Sprintf("its target revision is %d", s.TargetRevision))
		}
		if s.Status == StatusReady {
			return nil, nil
		}
		return one(BecameReady{Revision: c.Revision})
	}
	return nil, s.refuse(action, "")
}

func (c MarkFailed) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validateText(&f, "reason", c.Reason, true, MaxReasonLen)
	validateText(&f, "step", c.Step, false, 64)
	if err := f.Err(); err != nil {
		return nil, err
	}
	if err := existing(s); err != nil {
		return nil, err
	}
	switch s.Status {
	// ready too: a rollout can fail a machine before it targets it (a
	// cordon that fails, a reapply of the revision it runs), and the
	// machine must not look healthy while its node stays cordoned.
	case StatusPending, StatusProvisioning, StatusReady, StatusReconfiguring, StatusEnteringMaintenance, StatusUnassigning:
		return one(Failed{Reason: c.Reason, During: s.Status, Step: c.Step})
	case StatusFailed:
		return nil, nil // keep the first reason: it is the cause
	case StatusDeleting:
		return nil, s.refuse("be marked failed", "report a failed deletion instead")
	}
	return nil, s.refuse("be marked failed", "no step is in progress")
}

func (CompleteUnassign) decide(s *State, _ time.Time) ([]any, error) {
	if err := existing(s); err != nil {
		return nil, err
	}
	switch s.Status {
	case StatusUnassigning:
		return one(Unassigned{Pool: s.Pool})
	case StatusReadyUnassigned:
		return nil, nil
	}
	return nil, s.refuse("complete an unassignment", "it is not being unassigned")
}

func (CompleteMaintenanceEntry) decide(s *State, _ time.Time) ([]any, error) {
	if err := existing(s); err != nil {
		return nil, err
	}
	switch s.Status {
	case StatusEnteringMaintenance:
		return one(MaintenanceEntered{})
	case StatusMaintenance:
		return nil, nil
	}
	return nil, s.refuse("complete entering maintenance", "it is not entering maintenance")
}

// deleting returns the deletion or refuses with action.
func deleting(s *State, action string) (*Deletion, error) {
	if err := existing(s); err != nil {
		return nil, err
	}
	if s.Status != StatusDeleting || s.Deletion == nil {
		return nil, s.refuse(action, "it is not being deleted")
	}
	return s.Deletion, nil
}

func (CompleteDeletionPreparation) decide(s *State, _ time.Time) ([]any, error) {
	const action = "complete its deletion preparation"
	d, err := deleting(s, action)
	if err != nil {
		return nil, err
	}
	switch d.Phase {
	case PhaseStarted:
		return one(DeletionPrepared{})
	case PhaseCompleted:
		return nil, nil
	}
	return nil, s.refuse(action, "")
}

func (c FailDeletion) decide(s *State, _ time.Time) ([]any, error) {
	var f errs.Fields
	validateText(&f, "reason", c.Reason, true, MaxReasonLen)
	if err := f.Err(); err != nil {
		return nil, err
	}
	d, err := deleting(s, "have its deletion fail")
	if err != nil {
		return nil, err
	}
	if d.Phase == PhaseFailed {
		return nil, nil
	}
	return one(DeletionFailed{Reason: c.Reason})
}

func (CompleteDeletionAbort) decide(s *State, _ time.Time) ([]any, error) {
	const action = "complete aborting its deletion"
	d, err := deleting(s, action)
	if err != nil {
		return nil, err
	}
	if d.Phase != PhaseAborting {
		return nil, s.refuse(action, "its deletion is not being aborted")
	}
	return one(DeletionAborted{})
}

func (CompleteDeletion) decide(s *State, _ time.Time) ([]any, error) {
	const action = "complete its deletion"
	d, err := deleting(s, action)
	if err != nil {
		return nil, err
	}
	if d.Phase != PhaseCompleted {
		return nil, s.refuse(action, "its preparation has not completed")
	}
	return one(Deleted{Policy: d.Policy})
}
