// Package api is the boot service's contract with the other services: the
// events through which the rollout service asks a machine's agent to reboot,
// and the queries (NATS request/reply, queue group "boot") that show what
// became of such an instruction and a machine's startup log, and that
// resolve the files machines fetch (assets.go).
//
// It depends only on libs/events and nats.go, so that the rollout service
// and the gateway can import it without pulling in the boot service.
package api

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
)

// QueueGroup is the NATS queue group the boot service's replicas share.
const QueueGroup = "boot"

// Subjects the boot service serves (request/reply).
const (
	// SubjectInstructionGet answers an InstructionRef with an Instruction:
	// its status and the agent's last acknowledgement.
	SubjectInstructionGet = "cmd.boot.instruction.get"
	// SubjectInstructionList answers a MachineRef with the machine's
	// recent instructions, oldest first.
	SubjectInstructionList = "cmd.boot.instruction.list"
	// SubjectStartupLog answers a MachineRef with the startup log the
	// machine's agent reported last.
	SubjectStartupLog = "cmd.boot.machine.startup_log"
)

// Subjects lists every subject, for NATS permissions and tests.
var Subjects = []string{SubjectInstructionGet, SubjectInstructionList, SubjectStartupLog, SubjectAssetsResolve}

// Instruction kinds.
const (
	// KindReboot reboots the machine into Revision; the agent skips it
	// when that revision is already booted.
	KindReboot = "reboot"
	// KindReapply reboots the machine even into the revision it runs, to
	// unstick it.
	KindReapply = "reapply"
)

// InstructionAggregateTypes are the aggregate types whose events the boot
// service's instruction handlers read: the rollout service appends
// RebootRequested and InstructionWithdrawn to one of its own aggregates of
// these types (events.<org>.rollout.<id> or events.<org>.operation.<id>).
// Events of these types elsewhere are not seen.
var InstructionAggregateTypes = []string{"rollout", "operation"}

// RebootRequested asks the agent of machine UUID to reboot. The rollout
// service appends it (after it set the machine's target revision in the
// registry, since the machine boots its target revision); the boot service
// stores it for delivery to the agent's long poll.
//
// Delivery is at least once, deduplicated by InstructionID: storing the same
// InstructionID twice (a redelivered event, a retried append) delivers it
// once. A newer instruction for the same machine supersedes one that the
// agent has not accepted yet.
type RebootRequested struct {
	Org  string `json:"org"`  // must equal the event's organization
	UUID string `json:"uuid"` // the machine's SMBIOS UUID, lowercase canonical
	// InstructionID is the dedup id the agent sees: 1-128 characters of
	// [A-Za-z0-9._:-], unique per machine (a UUIDv7 is a good choice).
	InstructionID string `json:"instruction_id"`
	Kind          string `json:"kind"` // KindReboot or KindReapply
	// Pool and Revision name the pool revision the machine must boot
	// (Pool empty: the machine's pool when the instruction is delivered).
	Pool     string `json:"pool,omitempty"`
	Revision uint64 `json:"revision"`
	// MachineRevisionID is the machine revision ("mr-…") the agent compares
	// with what it booted. Empty: the boot service resolves it from Pool,
	// Revision and the machine's hostname and labels at delivery.
	MachineRevisionID string `json:"machine_revision_id,omitempty"`
	// ExpiresAt, if set, is when an instruction that was not accepted yet
	// stops being delivered (default: stored time + --instruction-ttl).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Reason is shown in logs and in the instruction's status.
	Reason string `json:"reason,omitempty"`
}

// EventTypeRebootRequested is RebootRequested's event type.
const EventTypeRebootRequested = "rollout.reboot_requested"

func (RebootRequested) EventType() string { return EventTypeRebootRequested }

// InstructionWithdrawn withdraws an instruction, e.g. because its rollout
// was aborted: it is no longer delivered, and an agent that tries to accept
// it is answered 409, so it does not reboot. An instruction the agent has
// already accepted cannot be stopped any more; it is marked withdrawn all
// the same and its later acknowledgements are still recorded.
type InstructionWithdrawn struct {
	Org           string `json:"org"`
	UUID          string `json:"uuid"`
	InstructionID string `json:"instruction_id"`
	Reason        string `json:"reason,omitempty"`
}

// EventTypeInstructionWithdrawn is InstructionWithdrawn's event type.
const EventTypeInstructionWithdrawn = "rollout.instruction_withdrawn"

func (InstructionWithdrawn) EventType() string { return EventTypeInstructionWithdrawn }

// EventTypes lists a zero value of every event type defined here, for
// events.Registry.RegisterAll.
func EventTypes() []any { return []any{RebootRequested{}, InstructionWithdrawn{}} }

// InstructionStatus is where an instruction stands.
type InstructionStatus string

const (
	// StatusPending: stored, not accepted by the agent yet; delivered to
	// every long poll of the machine's agent.
	StatusPending InstructionStatus = "pending"
	// StatusAccepted: the agent acknowledged it and is rebooting. It is
	// not delivered again.
	StatusAccepted InstructionStatus = "accepted"
	// StatusDone: carried out. Either the agent said so, or the boot
	// service saw the machine boot after the agent accepted it and then
	// report the requested revision (reboot) or any revision (reapply).
	StatusDone InstructionStatus = "done"
	// StatusSkipped: the agent did not reboot because the revision was
	// already booted.
	StatusSkipped InstructionStatus = "skipped"
	// StatusFailed: the agent could not carry it out, or the machine came
	// back with another revision than the one requested.
	StatusFailed InstructionStatus = "failed"
	// StatusSuperseded: a newer instruction for the machine replaced it
	// before the agent accepted it.
	StatusSuperseded InstructionStatus = "superseded"
	// StatusWithdrawn: InstructionWithdrawn arrived.
	StatusWithdrawn InstructionStatus = "withdrawn"
	// StatusExpired: not accepted before its expiry.
	StatusExpired InstructionStatus = "expired"
)

// Terminal reports whether the status is final.
func (s InstructionStatus) Terminal() bool { return s != StatusPending && s != StatusAccepted }

// InstructionRef names one instruction of one machine.
type InstructionRef struct {
	Org           string `json:"org"`
	UUID          string `json:"uuid"`
	InstructionID string `json:"instruction_id"`
}

// MachineRef names one machine.
type MachineRef struct {
	Org  string `json:"org"`
	UUID string `json:"uuid"`
}

// Instruction is an instruction and what became of it.
type Instruction struct {
	Org               string            `json:"org"`
	UUID              string            `json:"uuid"`
	ID                string            `json:"id"`
	Kind              string            `json:"kind"`
	Pool              string            `json:"pool,omitempty"`
	Revision          uint64            `json:"revision"`
	MachineRevisionID string            `json:"machine_revision_id,omitempty"`
	Reason            string            `json:"reason,omitempty"`
	Status            InstructionStatus `json:"status"`
	// Message is the last acknowledgement's message, or why the boot
	// service settled the instruction.
	Message string `json:"message,omitempty"`
	// SettledBy says who set a terminal status: "agent", "boot" (the boot
	// service saw the machine boot) or "rollout" (withdrawn).
	SettledBy string `json:"settled_by,omitempty"`
	// AgentStatus is the last status the agent acknowledged, which may
	// differ from Status when the boot service settled it first.
	AgentStatus InstructionStatus `json:"agent_status,omitempty"`

	IssuedAt        time.Time `json:"issued_at"`
	ExpiresAt       time.Time `json:"expires_at,omitzero"`
	Deliveries      int       `json:"deliveries"`
	LastDeliveredAt time.Time `json:"last_delivered_at,omitzero"`
	AcceptedAt      time.Time `json:"accepted_at,omitzero"`
	// RebootSeenAt is when the boot service served the machine's Ignition
	// after the agent accepted the instruction.
	RebootSeenAt time.Time `json:"reboot_seen_at,omitzero"`
	SettledAt    time.Time `json:"settled_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// RecordsBucket is the boot service's JetStream KV bucket of boot records,
// one per machine under the key "<org>.<uuid>". Other services may watch
// it to follow a machine's instructions without asking for them (the
// rollout service does, while a step waits on one). Of a value, only the
// part that decodes into RecordedInstructions is this contract; the rest
// is the boot service's own.
const RecordsBucket = "anvil_boot_machines"

// RecordedInstructions is the part of a boot record other services read:
// the machine's recent instructions, oldest first (the last 32). A record
// that does not exist, or was deleted, holds none.
type RecordedInstructions struct {
	Instructions []RecordedInstruction `json:"instructions,omitempty"`
}

// DecodeRecordedInstructions reads the instructions of a boot record's
// value; an empty value (a deleted record) holds none.
func DecodeRecordedInstructions(value []byte) (RecordedInstructions, error) {
	var r RecordedInstructions
	if len(value) == 0 {
		return r, nil
	}
	err := json.Unmarshal(value, &r)
	return r, err
}

// Find returns the instruction with the id.
func (r RecordedInstructions) Find(id string) (RecordedInstruction, bool) {
	for _, in := range r.Instructions {
		if in.ID == id {
			return in, true
		}
	}
	return RecordedInstruction{}, false
}

// RecordedInstruction is an instruction as the boot record stores it (the
// fields mean what Instruction's do).
type RecordedInstruction struct {
	ID                string            `json:"id"`
	Kind              string            `json:"kind"`
	Pool              string            `json:"pool,omitempty"`
	Revision          uint64            `json:"revision"`
	MachineRevisionID string            `json:"mrid,omitempty"`
	Reason            string            `json:"reason,omitempty"`
	Status            InstructionStatus `json:"status"`
	Message           string            `json:"message,omitempty"`
	SettledBy         string            `json:"settled_by,omitempty"`
	AgentStatus       InstructionStatus `json:"agent_status,omitempty"`
	IssuedAt          time.Time         `json:"issued_at"`
	ExpiresAt         time.Time         `json:"expires_at,omitzero"`
	Deliveries        int               `json:"deliveries,omitempty"`
	LastDeliveredAt   time.Time         `json:"last_delivered_at,omitzero"`
	AcceptedAt        time.Time         `json:"accepted_at,omitzero"`
	RebootSeenAt      time.Time         `json:"reboot_seen_at,omitzero"`
	SettledAt         time.Time         `json:"settled_at,omitzero"`
	UpdatedAt         time.Time         `json:"updated_at"`
}

// View is the instruction as the queries answer it.
func (in RecordedInstruction) View(org, uuid string) Instruction {
	return Instruction{
		Org: org, UUID: uuid, ID: in.ID, Kind: in.Kind, Pool: in.Pool, Revision: in.Revision,
		MachineRevisionID: in.MachineRevisionID, Reason: in.Reason, Status: in.Status, Message: in.Message,
		SettledBy: in.SettledBy, AgentStatus: in.AgentStatus, IssuedAt: in.IssuedAt, ExpiresAt: in.ExpiresAt,
		Deliveries: in.Deliveries, LastDeliveredAt: in.LastDeliveredAt, AcceptedAt: in.AcceptedAt,
		RebootSeenAt: in.RebootSeenAt, SettledAt: in.SettledAt, UpdatedAt: in.UpdatedAt,
	}
}

// InstructionList is a machine's recent instructions, oldest first (the boot
// service keeps the last 32 per machine).
type InstructionList struct {
	Items []Instruction `json:"items"`
}

// StartupLog is the last report of a machine's agent: the tail of the
// boot's journal and what the boot service made of the rest of the report.
type StartupLog struct {
	Org  string `json:"org"`
	UUID string `json:"uuid"`
	// BootedRevision is the machine revision the agent reported ("" when
	// its revision file was missing).
	BootedRevision string    `json:"booted_revision"`
	ReportedAt     time.Time `json:"reported_at"`
	Lines          []string  `json:"lines"`
	// Problems lists parts of the report that could not be recorded (an
	// incomplete hardware inventory, an unknown booted revision).
	Problems []string `json:"problems,omitempty"`
}

// GetInstruction reads one instruction; an unknown one is errs.KindNotFound.
func GetInstruction(ctx context.Context, nc *nats.Conn, r InstructionRef) (Instruction, error) {
	return command.Call[InstructionRef, Instruction](ctx, nc, SubjectInstructionGet, r)
}

// ListInstructions lists a machine's recent instructions.
func ListInstructions(ctx context.Context, nc *nats.Conn, r MachineRef) (InstructionList, error) {
	return command.Call[MachineRef, InstructionList](ctx, nc, SubjectInstructionList, r)
}

// GetStartupLog reads a machine's last startup log; a machine whose agent
// never reported is errs.KindNotFound.
func GetStartupLog(ctx context.Context, nc *nats.Conn, r MachineRef) (StartupLog, error) {
	return command.Call[MachineRef, StartupLog](ctx, nc, SubjectStartupLog, r)
}
