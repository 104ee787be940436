package app

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// batchRegistry takes boots in batches (BootReporter), answering as told.
type batchRegistry struct {
	stubRegistry
	bmu     sync.Mutex
	batches [][]regapi.ReportedIPXEBoot
	answer  func([]regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error)
}

func (b *batchRegistry) ReportIPXEBoots(_ context.Context, boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
	b.bmu.Lock()
	b.batches = append(b.batches, boots)
	b.bmu.Unlock()
	return b.answer(boots)
}

// Boots answered from memory go to a registry that takes batches in one
// request per reportBatch boots, each naming the version it was answered
// from; each result acts on its machine as a SelfRegister's answer would.
func TestKnownMachinesReportInBatches(t *testing.T) {
	uuids := []string{
		"4c4c4544-0035-4b10-8056-000000000011", // unchanged: kept, answered from memory again
		"4c4c4544-0035-4b10-8056-000000000012", // changed, still boots: remembered at its new version
		"4c4c4544-0035-4b10-8056-000000000013", // changed, waits now: remembered as waiting
		"4c4c4544-0035-4b10-8056-000000000014", // refused: forgotten
		"4c4c4544-0035-4b10-8056-000000000015", // the registry is away: queued again
	}
	k := NewKnownMachines(time.Hour, 10*time.Second)
	for _, u := range uuids {
		k.Remember(k.Ticket(), bootOf(u), booting(u, 5), knownT0)
		r := bootOf(u)
		r.At = knownT0.Add(time.Second)
		if _, ok := k.Boot(r, r.At); !ok {
			t.Fatalf("%s not known", u)
		}
	}
	reg := &batchRegistry{stubRegistry: stubRegistry{reply: func(r regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
		t.Errorf("%s reported on its own although the registry takes batches", r.UUID)
		return regapi.SelfRegisterReply{}, errs.Internal("unexpected")
	}}}
	reg.answer = func(boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		out := make([]regapi.IPXEBootResult, len(boots))
		for i, b := range boots {
			if b.Version != 5 || !b.At.Equal(knownT0.Add(time.Second)) {
				t.Errorf("reported %+v, want version 5 and the latest boot", b)
			}
			switch b.UUID {
			case uuids[0]:
				out[i] = regapi.IPXEBootResult{Version: 5}
			case uuids[1]:
				m := booting(b.UUID, 9).Machine
				m.TargetRevision = 2
				out[i] = regapi.IPXEBootResult{Version: 9, Machine: &m}
			case uuids[2]:
				m := booting(b.UUID, 9).Machine
				m.Pool, m.TargetRevision = "", 0
				out[i] = regapi.IPXEBootResult{Version: 9, Machine: &m}
			case uuids[3]:
				out[i] = regapi.IPXEBootResult{Error: errs.As(errs.Unauthorized("the token is not valid"))}
			case uuids[4]:
				out[i] = regapi.IPXEBootResult{Error: errs.As(errs.Unavailable("keeping the iPXE boot"))}
			}
		}
		return out, nil
	}
	reportedAt := knownT0.Add(20 * time.Second)
	k.report(context.Background(), reg, func() time.Time { return reportedAt }, discardLog{}, k.drain())
	if len(reg.batches) != 1 || len(reg.batches[0]) != len(uuids) {
		t.Fatalf("batches %v, want one of %d boots", reg.batches, len(uuids))
	}
	// The unchanged machine's entry is renewed: still known past its
	// first answer's TTL.
	if kb, ok := k.Boot(bootOf(uuids[0]), knownT0.Add(time.Hour+time.Second)); !ok || kb.Machine.TargetRevision != 1 {
		t.Fatalf("unchanged machine: known %v, %+v", ok, kb.Machine)
	}
	if kb, ok := k.Boot(bootOf(uuids[1]), reportedAt); !ok || kb.Machine.TargetRevision != 2 {
		t.Fatalf("changed machine: known %v, %+v", ok, kb.Machine)
	}
	// The machine that waits now is known as waiting: its next request
	// is confirmed with the registry, not answered from memory alone.
	if kb, ok := k.Boot(bootOf(uuids[2]), reportedAt); !ok || !kb.Waits || kb.version != 9 {
		t.Fatalf("machine that waits now: known %v, waits %v, version %d", ok, kb.Waits, kb.version)
	}
	if _, ok := k.Boot(bootOf(uuids[3]), reportedAt); ok {
		t.Fatalf("%s still known after the registry refused it", uuids[3])
	}
	if k.Pending() != 3 { // the requeued boot, and the two boots just made (a waiting machine's is not queued)
		t.Fatalf("pending %d, want 3", k.Pending())
	}
}

// A registry that does not take batches (no one answers the subject yet,
// a rolling upgrade) gets the boots one SelfRegister each.
func TestKnownMachinesFallBackToOneReportEach(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000021"
	k, reg := knownWithBatchRegistry(t, u)
	// what command.Call answers when no one serves the subject
	reg.answer = func([]regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		return nil, fmt.Errorf("no service answers %s: %w", regapi.SubjectReportIPXEBoots, nats.ErrNoResponders)
	}
	k.report(context.Background(), reg, func() time.Time { return knownT0.Add(20 * time.Second) }, discardLog{}, k.drain())
	if len(reg.batches) != 1 || len(reg.calls) != 1 || k.Pending() != 0 {
		t.Fatalf("batches %d, calls %d, pending %d", len(reg.batches), len(reg.calls), k.Pending())
	}
	if kb, ok := k.Boot(bootOf(u), knownT0.Add(time.Hour+time.Second)); !ok || kb.entry.version != 6 {
		t.Fatalf("the one-by-one answer was not kept: %v", ok)
	}
}

// A batch the registry did not answer in time may still be under way
// there: its boots wait for the next round instead of going one by one.
func TestKnownMachinesRequeueABatchNotAnswered(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000022"
	k, reg := knownWithBatchRegistry(t, u)
	reg.answer = func([]regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		return nil, errs.Unavailable("%s did not answer in time", regapi.SubjectReportIPXEBoots)
	}
	k.report(context.Background(), reg, func() time.Time { return knownT0.Add(20 * time.Second) }, discardLog{}, k.drain())
	if len(reg.batches) != 1 || len(reg.calls) != 0 || k.Pending() != 1 {
		t.Fatalf("batches %d, calls %d, pending %d; want the boot queued again, not sent alone", len(reg.batches), len(reg.calls), k.Pending())
	}
}

// knownWithBatchRegistry knows machine u, booted once, and a registry whose
// SelfRegister answers it at version 6 (its batch answer is the test's).
func knownWithBatchRegistry(t *testing.T, u string) (*KnownMachines, *batchRegistry) {
	t.Helper()
	k := NewKnownMachines(time.Hour, 10*time.Second)
	k.Remember(k.Ticket(), bootOf(u), booting(u, 5), knownT0)
	if _, ok := k.Boot(bootOf(u), knownT0.Add(time.Second)); !ok {
		t.Fatal("not known")
	}
	return k, &batchRegistry{stubRegistry: stubRegistry{reply: func(regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
		return regapi.SelfRegisterReply{MachineReply: booting(u, 6)}, nil
	}}}
}
