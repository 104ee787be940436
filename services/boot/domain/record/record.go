// Package record is what the boot service remembers about one machine,
// beyond what the registry holds: the machine revisions it served the
// machine (so that an agent's "booted mr-…" can be translated into the
// registry's pool revision number, and an agent credential checked), the
// revision the agent last reported, the instructions waiting for or
// acknowledged by the machine's agent, and which of the credentials issued
// to it are revoked.
//
// A Record is a value, stored as one JSON document per machine (a JetStream
// KV entry keyed <org>.<uuid>) and changed only through its methods, each
// of which reports whether it changed anything so that unchanged records
// are not written back. It is pure: the time is an argument.
package record

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
)

// Bounds that keep one record small.
const (
	MaxServed       = 8
	MaxInstructions = 32
	MaxMessage      = 1024
)

// Served is one machine revision served at /ignition.
type Served struct {
	MachineRevisionID string    `json:"mrid"`
	Pool              string    `json:"pool"`
	Revision          uint64    `json:"revision"` // pool revision number
	At                time.Time `json:"at"`
}

// Instruction is an instruction for the machine's agent and its state:
// the fields other services may read from the record (api.RecordedInstruction)
// and the trace of the request that asked for it.
type Instruction struct {
	api.RecordedInstruction
	// Trace is the W3C trace context of the request that asked for the
	// reboot (from rollout.reboot_requested): its delivery to the agent is
	// a span of that trace.
	Trace map[string]string `json:"trace,omitempty"`
}

// Record is one machine's boot record.
type Record struct {
	Org  string `json:"org"`
	UUID string `json:"uuid"`
	// Served lists the machine revisions served, oldest first.
	Served []Served `json:"served,omitempty"`
	// BootedRevision is the machine revision the agent reported last, and
	// ReportedRevision the pool revision it was translated to and reported
	// to the registry (0: not reported).
	BootedRevision   string    `json:"booted,omitempty"`
	BootedAt         time.Time `json:"booted_at,omitzero"`
	ReportedRevision uint64    `json:"reported,omitempty"`
	// Instructions, oldest first.
	Instructions []Instruction `json:"instructions,omitempty"`
	// Revoked is the latest revocation of the machine's credentials (nil:
	// none was ever revoked).
	Revoked *Revocation `json:"revoked,omitempty"`
	// Revision is the store's revision of the record as it was read (0:
	// there was none): an update made from this copy expects it, so that
	// it need not read the record again unless it changed since.
	Revision uint64 `json:"-"`
}

// Clone returns a deep copy, so that a method can be tried on a copy
// before anything is written.
func (r Record) Clone() Record {
	r.Served = slices.Clone(r.Served)
	r.Instructions = slices.Clone(r.Instructions)
	if r.Revoked != nil {
		v := *r.Revoked
		r.Revoked = &v
	}
	return r
}

// Key is the record's KV key.
func Key(org, uuid string) string { return org + "." + uuid }

// ---- served revisions ----

// ObserveIgnition records that the machine was served machine revision s
// (an Ignition fetch, i.e. the machine is booting) and notes the boot on
// every instruction the agent had accepted before.
func (r *Record) ObserveIgnition(s Served) bool {
	changed := false
	if i := r.servedIndex(s.MachineRevisionID); i < 0 || i != len(r.Served)-1 {
		if i >= 0 {
			r.Served = slices.Delete(r.Served, i, i+1)
		}
		r.Served = append(r.Served, s)
		if len(r.Served) > MaxServed {
			r.Served = slices.Delete(r.Served, 0, len(r.Served)-MaxServed)
		}
		changed = true
	}
	for i := range r.Instructions {
		in := &r.Instructions[i]
		if in.Status == api.StatusAccepted && in.RebootSeenAt.IsZero() && s.At.After(in.AcceptedAt) {
			in.RebootSeenAt, in.UpdatedAt = s.At, s.At
			changed = true
		}
	}
	return changed
}

func (r *Record) servedIndex(mrid string) int {
	for i, s := range r.Served {
		if s.MachineRevisionID == mrid {
			return i
		}
	}
	return -1
}

// ServedRevision returns what machine revision mrid was served as.
func (r *Record) ServedRevision(mrid string) (Served, bool) {
	if i := r.servedIndex(mrid); i >= 0 {
		return r.Served[i], true
	}
	return Served{}, false
}

// Latest returns the machine revision served last.
func (r *Record) Latest() (Served, bool) {
	if len(r.Served) == 0 {
		return Served{}, false
	}
	return r.Served[len(r.Served)-1], true
}

// Machine is the registry's view of the machine that credential checks need.
type Machine struct {
	Pool            string
	CurrentRevision uint64 // what its agent reported booting
	TargetRevision  uint64 // what a rollout moves it to
}

// CredentialCurrent reports whether an agent credential minted for machine
// revision mrid is still good: mrid must have been served to this machine,
// and be either the revision served last (what the machine most likely
// runs) or the machine's current or target revision in the registry. A
// credential of any older revision is refused; that is how credentials
// rotate with revisions. needMachine is true when the answer depends on m.
func (r *Record) CredentialCurrent(mrid string, m *Machine) (ok, needMachine bool) {
	s, found := r.ServedRevision(mrid)
	if !found {
		return false, false
	}
	if latest, _ := r.Latest(); latest.MachineRevisionID == mrid {
		return true, false
	}
	if m == nil {
		return false, true
	}
	return s.Revision == m.CurrentRevision || (s.Pool == m.Pool && s.Revision == m.TargetRevision), true
}

// ---- revocation ----

// Cause is the registry event that revoked a machine's credentials.
type Cause string

// The causes: the machine's life, or its life in a pool, ended.
const (
	CauseDeleted         Cause = "deleted"
	CauseUnassigned      Cause = "unassigned"
	CauseForceUnassigned Cause = "force_unassigned"
	CauseRegistered      Cause = "registered_again"
)

// Causes lists every cause (for metrics).
func Causes() []Cause {
	return []Cause{CauseDeleted, CauseUnassigned, CauseForceUnassigned, CauseRegistered}
}

// Explain says what happened, for refusals.
func (c Cause) Explain() string {
	switch c {
	case CauseDeleted:
		return "the machine was deleted"
	case CauseUnassigned:
		return "the machine was unassigned from its pool"
	case CauseForceUnassigned:
		return "the machine was force-unassigned from its pool"
	case CauseRegistered:
		return "the machine registered itself again after it was deleted"
	}
	return "the machine's credentials were revoked"
}

// Revocation says which credentials of the machine no longer work: every
// agent credential and per-boot token issued before Before. Times are kept
// to the millisecond, as credentials carry them.
type Revocation struct {
	Before time.Time `json:"before"`
	Cause  Cause     `json:"cause"`
	// Seq is the stream sequence of the registry event that revoked them.
	Seq uint64 `json:"seq,omitempty"`
}

// Revoke records that the credentials issued before `before` are revoked
// because of cause (the registry event at stream sequence seq). It only
// ever moves the bound forward, so that a redelivered or late event
// changes nothing, and it drops what the record knew of the machine's
// revisions before then (served, booted and reported revisions belong to
// the life that ended; a machine revision served again is a new entry).
//
// A registration revokes only when there was a life before it, i.e. when
// something was revoked already (every life ends with machine.deleted):
// a machine's first registration has nothing to revoke, and recording one
// would refuse the credentials of the version without an issue time that
// a machine runs with since before revocation existed.
func (r *Record) Revoke(before time.Time, cause Cause, seq uint64) bool {
	before = before.Truncate(time.Millisecond).UTC()
	if cause == CauseRegistered && r.Revoked == nil {
		return false
	}
	if r.Revoked != nil && !before.After(r.Revoked.Before) {
		return false
	}
	r.Revoked = &Revocation{Before: before, Cause: cause, Seq: seq}
	r.Served = slices.DeleteFunc(r.Served, func(s Served) bool { return s.At.Before(before) })
	if !r.BootedAt.After(before) {
		r.BootedRevision, r.BootedAt, r.ReportedRevision = "", time.Time{}, 0
	}
	return true
}

// CredentialRevoked reports whether a credential or per-boot token issued
// at issued is revoked. A zero issued is one of the versions that carry no
// issue time: it is revoked as soon as anything was, since nothing tells
// whether it was issued before.
func (r *Record) CredentialRevoked(issued time.Time) bool {
	if r.Revoked == nil {
		return false
	}
	if issued.IsZero() {
		return true
	}
	return issued.UnixMilli() < r.Revoked.Before.UnixMilli()
}

// ---- booted revisions ----

// ObserveBooted records the machine revision the agent reports booting
// (heartbeat or report) and settles the accepted instructions it answers:
// a reboot is done once the machine runs its revision, and failed if the
// machine came back (seen at /ignition) with another; a reapply is done
// once the machine came back at all. It returns whether anything changed.
func (r *Record) ObserveBooted(mrid string, now time.Time) bool {
	changed := false
	if mrid != "" && mrid != r.BootedRevision {
		r.BootedRevision, r.BootedAt, r.ReportedRevision = mrid, now, 0
		changed = true
	}
	for i := range r.Instructions {
		in := &r.Instructions[i]
		if in.Status != api.StatusAccepted {
			continue
		}
		switch {
		case in.Kind == api.KindReboot && mrid != "" && mrid == in.MachineRevisionID:
			in.settle(api.StatusDone, "boot", "the machine reported booting revision "+mrid, now)
			changed = true
		case in.RebootSeenAt.IsZero() || mrid == "":
			// still rebooting, or nothing to compare with
		case in.Kind == api.KindReapply:
			in.settle(api.StatusDone, "boot", "the machine booted again and reported revision "+mrid, now)
			changed = true
		default:
			in.settle(api.StatusFailed, "boot", fmt.Sprintf("the machine rebooted, but booted revision %s instead of %s", mrid, orUnknown(in.MachineRevisionID)), now)
			changed = true
		}
	}
	return changed
}

// MarkReported records that the booted revision was reported to the
// registry as pool revision rev.
func (r *Record) MarkReported(rev uint64) bool {
	if r.ReportedRevision == rev {
		return false
	}
	r.ReportedRevision = rev
	return true
}

// ---- instructions ----

// NewInstruction is an instruction as the rollout service asks for it.
type NewInstruction struct {
	ID                string
	Kind              string
	Pool              string
	Revision          uint64
	MachineRevisionID string
	Reason            string
	ExpiresAt         time.Time
	Trace             map[string]string
}

// ValidateInstruction checks an instruction request.
func ValidateInstruction(n NewInstruction) error {
	var f errs.Fields
	if !InstructionID(n.ID) {
		f.Add("instruction_id", "must be 1 to 128 characters of letters, digits, '.', '_', ':' and '-'")
	}
	if n.Kind != api.KindReboot && n.Kind != api.KindReapply {
		f.Add("kind", "must be %q or %q", api.KindReboot, api.KindReapply)
	}
	if n.Revision == 0 {
		f.Add("revision", "must be a pool revision number")
	}
	if n.Pool != "" && !label(n.Pool) {
		f.Add("pool", "must be an RFC 1123 label")
	}
	if n.MachineRevisionID != "" && !machineRevisionID(n.MachineRevisionID) {
		f.Add("machine_revision_id", "must be mr- followed by 20 hex digits")
	}
	if len(n.Reason) > MaxMessage || !utf8.ValidString(n.Reason) {
		f.Add("reason", "must be valid UTF-8 of at most %d bytes", MaxMessage)
	}
	return f.Err()
}

// InstructionID reports whether s is a valid instruction id.
func InstructionID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return false
		}
	}
	return true
}

// AddInstruction stores a new instruction as pending. It is idempotent: an
// id the record already has changes nothing (a redelivered event). A
// pending instruction that the agent has not accepted yet is superseded by
// the new one. issued is when it was requested (the event's time, so that
// a late redelivery keeps its original expiry); ttl sets the expiry when
// the request has none.
func (r *Record) AddInstruction(n NewInstruction, issued time.Time, ttl time.Duration) bool {
	now := issued
	if r.instruction(n.ID) >= 0 {
		return false
	}
	for i := range r.Instructions {
		if in := &r.Instructions[i]; in.Status == api.StatusPending {
			in.settle(api.StatusSuperseded, "boot", "superseded by instruction "+n.ID, now)
		}
	}
	exp := n.ExpiresAt
	if exp.IsZero() && ttl > 0 {
		exp = now.Add(ttl)
	}
	r.Instructions = append(r.Instructions, Instruction{RecordedInstruction: api.RecordedInstruction{
		ID: n.ID, Kind: n.Kind, Pool: n.Pool, Revision: n.Revision, MachineRevisionID: n.MachineRevisionID,
		Reason: truncate(n.Reason), Status: api.StatusPending, IssuedAt: now, ExpiresAt: exp, UpdatedAt: now,
	}, Trace: maps.Clone(n.Trace)})
	r.trim()
	return true
}

// trim keeps the newest MaxInstructions, dropping settled ones first.
func (r *Record) trim() {
	for len(r.Instructions) > MaxInstructions {
		drop := 0
		for i, in := range r.Instructions {
			if in.Status.Terminal() {
				drop = i
				break
			}
		}
		r.Instructions = slices.Delete(r.Instructions, drop, drop+1)
	}
}

// Withdraw withdraws an instruction. An unknown id is recorded as
// withdrawn, so that a request arriving after its withdrawal is ignored.
func (r *Record) Withdraw(id, reason string, now time.Time) bool {
	i := r.instruction(id)
	if i < 0 {
		r.Instructions = append(r.Instructions, Instruction{RecordedInstruction: api.RecordedInstruction{
			ID: id, Status: api.StatusWithdrawn, Message: truncate(reason),
			SettledBy: "rollout", IssuedAt: now, SettledAt: now, UpdatedAt: now}})
		r.trim()
		return true
	}
	in := &r.Instructions[i]
	if in.Status.Terminal() {
		return false
	}
	in.settle(api.StatusWithdrawn, "rollout", "withdrawn: "+reason, now)
	return true
}

// Expire settles pending instructions past their expiry.
func (r *Record) Expire(now time.Time) bool {
	changed := false
	for i := range r.Instructions {
		in := &r.Instructions[i]
		if in.Status == api.StatusPending && !in.ExpiresAt.IsZero() && !now.Before(in.ExpiresAt) {
			in.settle(api.StatusExpired, "boot", "not accepted before it expired at "+in.ExpiresAt.UTC().Format(time.RFC3339), now)
			changed = true
		}
	}
	return changed
}

// Deliverable returns the instructions to hand the agent now: the pending
// ones, unless an instruction is accepted and its reboot not yet settled
// (one reboot at a time). Call Expire first.
func (r *Record) Deliverable() []Instruction {
	var out []Instruction
	for _, in := range r.Instructions {
		switch in.Status {
		case api.StatusAccepted:
			return nil
		case api.StatusPending:
			out = append(out, in)
		}
	}
	return out
}

// MarkDelivered counts a delivery of each id.
func (r *Record) MarkDelivered(ids []string, now time.Time) bool {
	changed := false
	for _, id := range ids {
		if i := r.instruction(id); i >= 0 {
			in := &r.Instructions[i]
			in.Deliveries++
			in.LastDeliveredAt, in.UpdatedAt = now, now
			changed = true
		}
	}
	return changed
}

// Resolve sets the machine revision an instruction asks for.
func (r *Record) Resolve(id, mrid string, now time.Time) bool {
	i := r.instruction(id)
	if i < 0 || r.Instructions[i].MachineRevisionID == mrid {
		return false
	}
	r.Instructions[i].MachineRevisionID, r.Instructions[i].UpdatedAt = mrid, now
	return true
}

// Ack applies an acknowledgement from the agent. A repeated ack changes
// nothing; "accepted" for an instruction that is settled, withdrawn,
// superseded or expired is a conflict (the agent must not act on it); a
// terminal ack after the boot service settled the instruction is recorded
// as the agent's status. An unknown id is not found.
func (r *Record) Ack(id string, status api.InstructionStatus, message string, now time.Time) (bool, error) {
	i := r.instruction(id)
	if i < 0 {
		return false, errs.NotFound("instruction %s is not known for this machine", id)
	}
	in := &r.Instructions[i]
	message = truncate(message)
	switch status {
	case api.StatusAccepted:
		switch in.Status {
		case api.StatusPending:
			in.Status, in.AgentStatus, in.Message, in.AcceptedAt, in.UpdatedAt = api.StatusAccepted, status, message, now, now
			return true, nil
		case api.StatusAccepted:
			return false, nil
		}
		return false, errs.Conflict("instruction %s is %s; it must not be carried out", id, in.Status)
	case api.StatusDone, api.StatusSkipped, api.StatusFailed:
		if in.Status.Terminal() {
			if in.AgentStatus == status {
				return false, nil
			}
			in.AgentStatus, in.UpdatedAt = status, now
			if in.SettledBy != "agent" && in.Message == "" {
				in.Message = message
			}
			return true, nil
		}
		in.settle(status, "agent", message, now)
		in.AgentStatus = status
		return true, nil
	}
	return false, errs.Invalid("status", "must be accepted, done, skipped or failed")
}

// Instruction returns one instruction.
func (r *Record) Instruction(id string) (Instruction, bool) {
	if i := r.instruction(id); i >= 0 {
		return r.Instructions[i], true
	}
	return Instruction{}, false
}

func (r *Record) instruction(id string) int {
	for i, in := range r.Instructions {
		if in.ID == id {
			return i
		}
	}
	return -1
}

func (in *Instruction) settle(status api.InstructionStatus, by, message string, now time.Time) {
	in.Status, in.SettledBy, in.Message, in.SettledAt, in.UpdatedAt = status, by, truncate(message), now, now
}

func truncate(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	if len(s) <= MaxMessage {
		return s
	}
	n := MaxMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func orUnknown(s string) string {
	if s == "" {
		return "(unresolved)"
	}
	return s
}

func label(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func machineRevisionID(s string) bool {
	if len(s) != 23 || !strings.HasPrefix(s, "mr-") {
		return false
	}
	for i := 3; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
