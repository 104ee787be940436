package record

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

const (
	mr1 = "mr-11111111111111111111"
	mr2 = "mr-22222222222222222222"
	mr3 = "mr-33333333333333333333"
)

func reboot(id, mrid string) NewInstruction {
	return NewInstruction{ID: id, Kind: api.KindReboot, Pool: "workers", Revision: 2, MachineRevisionID: mrid}
}

func TestServedRevisionsAndCredentials(t *testing.T) {
	var r Record
	if !r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(0)}) {
		t.Fatal("first serve changed nothing")
	}
	if r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(5)}) {
		t.Error("serving the latest revision again must not rewrite the record")
	}
	r.ObserveIgnition(Served{MachineRevisionID: mr2, Pool: "workers", Revision: 2, At: at(10)})
	if s, ok := r.ServedRevision(mr1); !ok || s.Revision != 1 {
		t.Errorf("served mr1 = %+v %v", s, ok)
	}
	for _, tc := range []struct {
		name     string
		mrid     string
		m        *Machine
		ok, need bool
	}{
		{"latest needs no registry", mr2, nil, true, false},
		{"never served", mr3, &Machine{Pool: "workers", CurrentRevision: 3, TargetRevision: 3}, false, false},
		{"older: ask the registry", mr1, nil, false, true},
		{"older but current", mr1, &Machine{Pool: "workers", CurrentRevision: 1, TargetRevision: 2}, true, true},
		{"older but target", mr1, &Machine{Pool: "workers", CurrentRevision: 0, TargetRevision: 1}, true, true},
		{"older, target in another pool", mr1, &Machine{Pool: "other", CurrentRevision: 2, TargetRevision: 1}, false, true},
		{"older and rotated out", mr1, &Machine{Pool: "workers", CurrentRevision: 2, TargetRevision: 2}, false, true},
	} {
		ok, need := r.CredentialCurrent(tc.mrid, tc.m)
		if ok != tc.ok || need != tc.need {
			t.Errorf("%s: ok=%v need=%v, want %v %v", tc.name, ok, need, tc.ok, tc.need)
		}
	}
	// Serving an older revision again makes it the latest.
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(20)})
	if l, _ := r.Latest(); l.MachineRevisionID != mr1 || len(r.Served) != 2 {
		t.Errorf("latest %+v, served %d", l, len(r.Served))
	}
	for i := range 2 * MaxServed {
		r.ObserveIgnition(Served{MachineRevisionID: fmt.Sprintf("mr-%020x", i+100), Revision: uint64(i), At: at(30 + i)})
	}
	if len(r.Served) != MaxServed {
		t.Errorf("served grows to %d", len(r.Served))
	}
}

func TestRebootLifecycle(t *testing.T) {
	var r Record
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(0)})
	r.ObserveBooted(mr1, at(1))
	if !r.AddInstruction(reboot("i-1", mr2), at(10), time.Hour) {
		t.Fatal("not added")
	}
	if r.AddInstruction(reboot("i-1", mr2), at(11), time.Hour) {
		t.Error("a redelivered request was stored twice")
	}
	if d := r.Deliverable(); len(d) != 1 || d[0].ID != "i-1" || !d[0].ExpiresAt.Equal(at(10).Add(time.Hour)) {
		t.Fatalf("deliverable %+v", d)
	}
	r.MarkDelivered([]string{"i-1"}, at(12))
	if ch, err := r.Ack("i-1", api.StatusAccepted, "rebooting", at(13)); !ch || err != nil {
		t.Fatalf("accept: %v %v", ch, err)
	}
	if ch, err := r.Ack("i-1", api.StatusAccepted, "rebooting", at(14)); ch || err != nil {
		t.Errorf("repeated accept: %v %v", ch, err)
	}
	if d := r.Deliverable(); len(d) != 0 {
		t.Errorf("accepted instruction delivered again: %+v", d)
	}
	// A heartbeat of the old boot settles nothing.
	r.ObserveBooted(mr1, at(15))
	if in, _ := r.Instruction("i-1"); in.Status != api.StatusAccepted {
		t.Fatalf("status %s", in.Status)
	}
	// The machine fetches its Ignition: it rebooted.
	if !r.ObserveIgnition(Served{MachineRevisionID: mr2, Pool: "workers", Revision: 2, At: at(60)}) {
		t.Error("reboot not noted")
	}
	r.ObserveBooted(mr2, at(90))
	in, _ := r.Instruction("i-1")
	if in.Status != api.StatusDone || in.SettledBy != "boot" || in.Deliveries != 1 || !in.RebootSeenAt.Equal(at(60)) {
		t.Fatalf("after boot: %+v", in)
	}
	// The new agent (with a surviving state file) says done too.
	if ch, err := r.Ack("i-1", api.StatusDone, "rebooted into revision "+mr2, at(91)); !ch || err != nil {
		t.Errorf("late done: %v %v", ch, err)
	}
	if in, _ := r.Instruction("i-1"); in.Status != api.StatusDone || in.AgentStatus != api.StatusDone {
		t.Errorf("after late done: %+v", in)
	}
	// An accept after the end is refused: the agent must not reboot again.
	if _, err := r.Ack("i-1", api.StatusAccepted, "", at(92)); !errs.Is(err, errs.KindConflict) {
		t.Errorf("accept after done: %v", err)
	}
}

func TestRebootIntoAnotherRevisionFails(t *testing.T) {
	var r Record
	r.AddInstruction(reboot("i-1", mr2), at(0), time.Hour)
	r.Ack("i-1", api.StatusAccepted, "", at(1))
	r.ObserveIgnition(Served{MachineRevisionID: mr3, Pool: "workers", Revision: 3, At: at(30)})
	r.ObserveBooted(mr3, at(40))
	if in, _ := r.Instruction("i-1"); in.Status != api.StatusFailed || !strings.Contains(in.Message, "instead of "+mr2) {
		t.Errorf("%+v", in)
	}
}

func TestReapplyIsDoneWhenTheMachineCameBack(t *testing.T) {
	var r Record
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(0)})
	r.AddInstruction(NewInstruction{ID: "i-2", Kind: api.KindReapply, Pool: "workers", Revision: 1, MachineRevisionID: mr1}, at(10), time.Hour)
	r.Ack("i-2", api.StatusAccepted, "", at(11))
	r.ObserveBooted(mr1, at(12)) // heartbeat before the reboot: same revision, not done yet
	if in, _ := r.Instruction("i-2"); in.Status != api.StatusAccepted {
		t.Fatalf("reapply settled before the reboot: %+v", in)
	}
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(60)})
	r.ObserveBooted(mr1, at(90))
	if in, _ := r.Instruction("i-2"); in.Status != api.StatusDone {
		t.Errorf("%+v", in)
	}
}

func TestSupersedeWithdrawExpire(t *testing.T) {
	var r Record
	r.AddInstruction(reboot("i-1", mr2), at(0), time.Hour)
	r.AddInstruction(reboot("i-2", mr3), at(1), time.Hour)
	if in, _ := r.Instruction("i-1"); in.Status != api.StatusSuperseded {
		t.Errorf("i-1 %s", in.Status)
	}
	if _, err := r.Ack("i-1", api.StatusAccepted, "", at(2)); !errs.Is(err, errs.KindConflict) {
		t.Errorf("accepting a superseded instruction: %v", err)
	}
	if !r.Withdraw("i-2", "rollout aborted", at(3)) || r.Withdraw("i-2", "again", at(4)) {
		t.Error("withdraw is not idempotent")
	}
	if d := r.Deliverable(); len(d) != 0 {
		t.Errorf("withdrawn delivered: %+v", d)
	}
	// Withdrawn before it arrived: the late request is ignored.
	r.Withdraw("i-3", "aborted", at(5))
	if r.AddInstruction(reboot("i-3", mr2), at(6), time.Hour) {
		t.Error("a withdrawn instruction was stored")
	}
	// Expiry.
	r.AddInstruction(NewInstruction{ID: "i-4", Kind: api.KindReboot, Revision: 2, ExpiresAt: at(100)}, at(7), time.Hour)
	if r.Expire(at(99)) || !r.Expire(at(100)) {
		t.Error("expiry at the wrong time")
	}
	if _, err := r.Ack("i-4", api.StatusAccepted, "", at(101)); !errs.Is(err, errs.KindConflict) {
		t.Errorf("accepting an expired instruction: %v", err)
	}
	if _, err := r.Ack("nope", api.StatusDone, "", at(101)); !errs.Is(err, errs.KindNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := r.Ack("i-4", "bogus", "", at(101)); !errs.Is(err, errs.KindValidation) {
		t.Errorf("bad status: %v", err)
	}
}

func TestOneRebootAtATime(t *testing.T) {
	var r Record
	r.AddInstruction(reboot("i-1", mr2), at(0), time.Hour)
	r.Ack("i-1", api.StatusAccepted, "", at(1))
	r.AddInstruction(reboot("i-2", mr3), at(2), time.Hour)
	if d := r.Deliverable(); len(d) != 0 {
		t.Errorf("a second reboot was delivered while one is under way: %+v", d)
	}
	r.Ack("i-1", api.StatusFailed, "reboot failed", at(3))
	if d := r.Deliverable(); len(d) != 1 || d[0].ID != "i-2" {
		t.Errorf("deliverable %+v", d)
	}
}

func TestBoundsAndMessages(t *testing.T) {
	var r Record
	for i := range 3 * MaxInstructions {
		id := fmt.Sprintf("i-%d", i)
		r.AddInstruction(reboot(id, mr2), at(i), time.Hour)
	}
	if len(r.Instructions) != MaxInstructions {
		t.Errorf("%d instructions kept", len(r.Instructions))
	}
	if d := r.Deliverable(); len(d) != 1 || d[0].ID != fmt.Sprintf("i-%d", 3*MaxInstructions-1) {
		t.Errorf("deliverable %+v", d)
	}
	id := r.Deliverable()[0].ID
	r.Ack(id, api.StatusFailed, strings.Repeat("é", MaxMessage)+"\xff", at(1000))
	if in, _ := r.Instruction(id); len(in.Message) > MaxMessage+len("…") || !strings.HasSuffix(in.Message, "…") {
		t.Errorf("message not bounded: %d bytes", len(in.Message))
	}
}

func TestValidateInstruction(t *testing.T) {
	if err := ValidateInstruction(reboot("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", mr2)); err != nil {
		t.Fatal(err)
	}
	err := ValidateInstruction(NewInstruction{ID: "a/b", Kind: "format", Pool: "Bad_Pool", MachineRevisionID: "mr-x", Reason: "\xff"})
	if e := errs.As(err); e == nil || len(e.Fields) != 6 {
		t.Errorf("%v", err)
	}
}

func TestRevocation(t *testing.T) {
	ms := time.Millisecond
	var r Record
	if r.CredentialRevoked(at(0)) || r.CredentialRevoked(time.Time{}) {
		t.Fatal("nothing revoked yet")
	}
	// A first registration revokes nothing: there was no life before.
	if r.Revoke(at(1), CauseRegistered, 3) || r.Revoked != nil {
		t.Fatalf("first registration revoked: %+v", r.Revoked)
	}
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(5)})
	r.ObserveBooted(mr1, at(6))
	r.MarkReported(1)
	r.ObserveIgnition(Served{MachineRevisionID: mr2, Pool: "workers", Revision: 2, At: at(20)})

	if !r.Revoke(at(10).Add(ms+300*time.Microsecond), CauseUnassigned, 7) {
		t.Fatal("unassignment revoked nothing")
	}
	if r.Revoked.Before != at(10).Add(ms) || r.Revoked.Cause != CauseUnassigned || r.Revoked.Seq != 7 {
		t.Errorf("revocation %+v (kept to the millisecond)", r.Revoked)
	}
	// What the record knew of the life before is gone; what came after stays.
	if _, ok := r.ServedRevision(mr1); ok || len(r.Served) != 1 || r.BootedRevision != "" || r.ReportedRevision != 0 {
		t.Errorf("after the revocation: %+v", r)
	}
	for _, tc := range []struct {
		name    string
		issued  time.Time
		revoked bool
	}{
		{"long before", at(0), true},
		{"the millisecond before", at(10), true},
		{"the same millisecond", at(10).Add(ms), false},
		{"within that millisecond", at(10).Add(ms + 999*time.Microsecond), false},
		{"after", at(11), false},
		{"no issue time (pb1, ac1)", time.Time{}, true},
	} {
		if got := r.CredentialRevoked(tc.issued); got != tc.revoked {
			t.Errorf("%s: revoked=%v, want %v", tc.name, got, tc.revoked)
		}
	}
	// Redelivered, late or older events change nothing.
	for _, c := range []struct {
		before time.Time
		cause  Cause
	}{
		{at(10).Add(ms), CauseUnassigned},
		{at(9), CauseDeleted},
		{at(10), CauseRegistered},
	} {
		if r.Revoke(c.before, c.cause, 99) || r.Revoked.Cause != CauseUnassigned {
			t.Errorf("revoke(%s, %s) changed the record: %+v", c.before, c.cause, r.Revoked)
		}
	}
	// After a life ended, registering again moves the bound.
	if !r.Revoke(at(30), CauseRegistered, 12) || r.Revoked.Before != at(30) || len(r.Served) != 0 {
		t.Errorf("registration after a deletion: %+v %+v", r.Revoked, r.Served)
	}
	if !r.CredentialRevoked(at(20)) || r.CredentialRevoked(at(30)) {
		t.Error("the new bound is not applied")
	}
	// Clone does not share the revocation.
	c := r.Clone()
	c.Revoke(at(40), CauseDeleted, 13)
	if r.Revoked.Before != at(30) {
		t.Error("a clone's revocation changed the original")
	}
	for _, cause := range Causes() {
		if strings.Contains(cause.Explain(), "revoked") {
			t.Errorf("%s has no explanation of its own", cause)
		}
	}
}

// The boot record's stored form is read by other services through
// api.DecodeRecordedInstructions (the rollout follows instructions by
// watching the bucket): every instruction must decode to what the
// queries answer for it.
func TestRecordedInstructionsDecodeFromTheStoredRecord(t *testing.T) {
	r := Record{Org: "acme", UUID: "4c4c4544-0000-1000-8000-000000000001"}
	r.ObserveIgnition(Served{MachineRevisionID: mr1, Pool: "workers", Revision: 1, At: at(0)})
	r.AddInstruction(reboot("i-1", mr2), at(1), time.Hour)
	r.AddInstruction(NewInstruction{ID: "i-2", Kind: api.KindReboot, Pool: "workers", Revision: 3, MachineRevisionID: mr3,
		Reason: "rollout r-1", Trace: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}, at(2), time.Hour)
	r.MarkDelivered([]string{"i-2"}, at(3))
	if _, err := r.Ack("i-2", api.StatusAccepted, "rebooting", at(4)); err != nil {
		t.Fatal(err)
	}
	r.Withdraw("i-9", "the rollout was aborted", at(5))
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.DecodeRecordedInstructions(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Instructions) != len(r.Instructions) {
		t.Fatalf("decoded %d instructions, the record holds %d", len(got.Instructions), len(r.Instructions))
	}
	for _, in := range r.Instructions {
		dec, ok := got.Find(in.ID)
		if !ok {
			t.Fatalf("instruction %s not decoded", in.ID)
		}
		if want, have := in.View(r.Org, r.UUID), dec.View(r.Org, r.UUID); !reflect.DeepEqual(want, have) {
			t.Errorf("instruction %s:\n stored %+v\ndecoded %+v", in.ID, want, have)
		}
	}
	if in, _ := got.Find("i-2"); in.Status != api.StatusAccepted || in.AcceptedAt.IsZero() {
		t.Errorf("i-2 decoded as %s accepted at %v, want accepted", in.Status, in.AcceptedAt)
	}
	if _, ok := got.Find("i-404"); ok {
		t.Error("found an instruction the record does not hold")
	}
	if none, err := api.DecodeRecordedInstructions(nil); err != nil || len(none.Instructions) != 0 {
		t.Errorf("a deleted record = %+v, %v; want no instructions", none, err)
	}
	if _, err := api.DecodeRecordedInstructions([]byte("{")); err == nil {
		t.Error("a value that does not decode was accepted")
	}
}
