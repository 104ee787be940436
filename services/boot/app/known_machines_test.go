package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

var knownT0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func bootOf(uuid string) regapi.SelfRegister {
	return regapi.SelfRegister{EnrollmentToken: "anvil_enroll_x", UUID: uuid, MAC: "52-54-00-00-00-01", At: knownT0}
}

func booting(uuid string, version uint64) regapi.MachineReply {
	return regapi.MachineReply{Version: version, Machine: regapi.Machine{
		Org: "acme", UUID: uuid, Pool: "workers", TargetRevision: 1, Status: regapi.StatusProvisioning}}
}

func TestKnownMachinesForgetWhatChanged(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000001"
	k := NewKnownMachines(time.Minute, 10*time.Second)
	remember := func(version uint64) {
		k.Remember(k.Ticket(), bootOf(u), booting(u, version), knownT0)
	}
	known := func(r regapi.SelfRegister, at time.Time) bool { _, ok := k.Boot(r, at); return ok }

	remember(10)
	if !known(bootOf(u), knownT0.Add(time.Second)) {
		t.Fatal("a remembered machine is not known")
	}
	other := bootOf(u)
	other.MAC = "52-54-00-00-00-02"
	if known(other, knownT0) {
		t.Fatal("known from another MAC")
	}
	other = bootOf(u)
	other.EnrollmentToken = "anvil_enroll_y"
	if known(other, knownT0) {
		t.Fatal("known with another enrollment token")
	}
	if known(bootOf(u), knownT0.Add(time.Minute)) {
		t.Fatal("known after its TTL")
	}

	// An event the answer included changes nothing; a later one forgets.
	k.Forget("acme", u, 10)
	if !known(bootOf(u), knownT0) {
		t.Fatal("forgotten at an event its answer included")
	}
	k.Forget("acme", u, 11)
	if known(bootOf(u), knownT0) {
		t.Fatal("known after a later event")
	}
	// An answer older than an event seen is not kept.
	remember(10)
	if known(bootOf(u), knownT0) {
		t.Fatal("an answer that predates a seen event was kept")
	}
	remember(12)
	if !known(bootOf(u), knownT0) {
		t.Fatal("a newer answer was not kept")
	}

	// An organization event forgets its machines, and answers under way.
	ticket := k.Ticket()
	k.ForgetOrg("acme")
	if known(bootOf(u), knownT0) {
		t.Fatal("known after its organization changed")
	}
	k.Remember(ticket, bootOf(u), booting(u, 13), knownT0)
	if known(bootOf(u), knownT0) {
		t.Fatal("an answer under way across an organization event was kept")
	}
	remember(13)
	k.Reset()
	if known(bootOf(u), knownT0) || k.Len() != 0 {
		t.Fatal("known after a reset")
	}
	// The boot service's own reasons (seq 0) always forget.
	remember(14)
	k.Forget("acme", u, 0)
	if known(bootOf(u), knownT0) {
		t.Fatal("known after Forget(0)")
	}
}

// stubRegistry answers SelfRegister as told (a pure unit test of the
// reports).
type stubRegistry struct {
	Registry
	mu    sync.Mutex
	calls []regapi.SelfRegister
	reply func(regapi.SelfRegister) (regapi.SelfRegisterReply, error)
}

func (s *stubRegistry) SelfRegister(_ context.Context, r regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
	s.mu.Lock()
	s.calls = append(s.calls, r)
	s.mu.Unlock()
	return s.reply(r)
}

func TestKnownMachinesReportLatestBootOncePerInterval(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000002"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	k.Remember(k.Ticket(), bootOf(u), booting(u, 5), knownT0)
	reg := &stubRegistry{reply: func(regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
		return regapi.SelfRegisterReply{MachineReply: booting(u, 6)}, nil
	}}
	nop := discardLog{}
	for i := range 3 {
		r := bootOf(u)
		r.At = knownT0.Add(time.Duration(i+1) * time.Second)
		if _, ok := k.Boot(r, r.At); !ok {
			t.Fatal("not known")
		}
	}
	// The machine was heard of at knownT0 (the registry answered then):
	// nothing is due before the interval.
	if due := k.due(knownT0.Add(5 * time.Second)); len(due) != 0 || k.Pending() != 1 {
		t.Fatalf("due %v, pending %d", due, k.Pending())
	}
	due := k.due(knownT0.Add(10 * time.Second))
	if len(due) != 1 || !due[0].At.Equal(knownT0.Add(3*time.Second)) {
		t.Fatalf("due %v, want the latest boot only", due)
	}
	reportedAt := knownT0.Add(10 * time.Second)
	clock := func() time.Time { return reportedAt }
	k.report(context.Background(), reg, clock, nop, due)
	if len(reg.calls) != 1 || k.Len() != 1 {
		t.Fatalf("calls %v, known %d", reg.calls, k.Len())
	}
	// A refusal forgets the machine: its next boot asks.
	if _, ok := k.Boot(bootOf(u), reportedAt.Add(time.Second)); !ok {
		t.Fatal("the report's answer was not kept")
	}
	reg.reply = func(regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
		return regapi.SelfRegisterReply{}, errs.Forbidden("token revoked")
	}
	k.report(context.Background(), reg, clock, nop, k.drain())
	if k.Len() != 0 || k.Pending() != 0 {
		t.Fatalf("known %d, pending %d after a refusal", k.Len(), k.Pending())
	}
}

// A boot whose report failed because the registry is away is reported
// with the next round, not lost; a newer boot queued meanwhile wins.
func TestKnownMachinesRequeueFailedReports(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000003"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	k.Remember(k.Ticket(), bootOf(u), booting(u, 5), knownT0)
	first := bootOf(u)
	first.At = knownT0.Add(time.Second)
	if _, ok := k.Boot(first, first.At); !ok {
		t.Fatal("not known")
	}
	reg := &stubRegistry{reply: func(regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
		return regapi.SelfRegisterReply{}, errs.Unavailable("the registry does not answer")
	}}
	clock := func() time.Time { return knownT0.Add(20 * time.Second) }
	k.report(context.Background(), reg, clock, discardLog{}, k.drain())
	if k.Pending() != 1 {
		t.Fatalf("pending %d after a failed report, want the boot queued again", k.Pending())
	}
	// A newer boot replaces it; a failure of the older one does not undo that.
	newer := bootOf(u)
	newer.At = knownT0.Add(2 * time.Second)
	if _, ok := k.Boot(newer, newer.At); !ok {
		t.Fatal("not known")
	}
	k.requeue(first)
	got := k.drain()
	if len(got) != 1 || !got[0].At.Equal(newer.At) {
		t.Fatalf("queued %v, want the newer boot only", got)
	}
}

// An event the boot service saw itself (no sequence) also voids answers
// the registry gave before it: a ticket taken earlier keeps nothing.
func TestKnownMachinesForgetWithoutSequenceVoidsTickets(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000004"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	ticket := k.Ticket()
	k.Forget("acme", u, 0)
	k.Remember(ticket, bootOf(u), booting(u, 5), knownT0)
	if k.Len() != 0 {
		t.Fatal("an answer given before the instruction was kept")
	}
}

type discardLog struct{}

func (discardLog) DebugContext(context.Context, string, ...any) {}
