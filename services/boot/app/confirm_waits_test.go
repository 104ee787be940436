package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

func waiting(uuid string, version uint64) regapi.MachineReply {
	return regapi.MachineReply{Version: version, Machine: regapi.Machine{
		Org: "acme", UUID: uuid, Status: regapi.StatusReadyUnassigned}}
}

// knownWaiting remembers machine u as waiting at version 5 and returns
// its next request as Boot sees it.
func knownWaiting(t *testing.T, k *KnownMachines, u string) (regapi.SelfRegister, KnownBoot) {
	t.Helper()
	k.Remember(k.Ticket(), bootOf(u), waiting(u, 5), knownT0)
	r := bootOf(u)
	r.At, r.RetryIn = knownT0.Add(time.Second), 4*time.Second
	kb, ok := k.Boot(r, r.At)
	if !ok || !kb.Waits {
		t.Fatalf("%s: known %v, waits %v", u, ok, kb.Waits)
	}
	return r, kb
}

func fixedNow() time.Time { return knownT0.Add(2 * time.Second) }

// A machine remembered as waiting is not answered from memory alone, and
// its boot is not queued for a later report: the confirmation records it.
func TestWaitingMachineIsConfirmedNotQueued(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000031"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	knownWaiting(t, k, u)
	if k.Pending() != 0 {
		t.Fatalf("pending %d: a waiting machine's boot was queued", k.Pending())
	}
}

// Each confirmation acts on its machine as the registry's answer to a
// SelfRegister would: unchanged keeps the remembered answer (renewed),
// changed remembers the new one, a refusal forgets the machine, and the
// registry away leaves it known.
func TestConfirmWaitResults(t *testing.T) {
	uuids := []string{
		"4c4c4544-0035-4b10-8056-000000000041", // unchanged
		"4c4c4544-0035-4b10-8056-000000000042", // assigned meanwhile: boots now
		"4c4c4544-0035-4b10-8056-000000000043", // token refused
		"4c4c4544-0035-4b10-8056-000000000044", // registry away for this one
	}
	k := NewKnownMachines(time.Hour, 10*time.Second)
	reg := &batchRegistry{}
	reg.answer = func(boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		out := make([]regapi.IPXEBootResult, len(boots))
		for i, b := range boots {
			if b.Version != 5 || b.RetryIn != 4*time.Second {
				return nil, fmt.Errorf("boot %+v: want version 5 and the request's retry", b)
			}
			switch b.UUID {
			case uuids[0]:
				out[i] = regapi.IPXEBootResult{Version: 5}
			case uuids[1]:
				m := booting(b.UUID, 8).Machine
				out[i] = regapi.IPXEBootResult{Version: 8, Machine: &m}
			case uuids[2]:
				out[i] = regapi.IPXEBootResult{Error: errs.As(errs.Unauthorized("the token is not valid"))}
			case uuids[3]:
				out[i] = regapi.IPXEBootResult{Error: errs.As(errs.Unavailable("keeping the iPXE boot"))}
			}
		}
		return out, nil
	}
	confirm := func(u string) (WaitConfirmation, error) {
		r, kb := knownWaiting(t, k, u)
		return k.ConfirmWait(context.Background(), reg, r, kb, fixedNow, discardLog{})
	}

	c, err := confirm(uuids[0])
	if err != nil || c.Alone || c.Machine.Pool != "" || c.Machine.UUID != uuids[0] {
		t.Fatalf("unchanged: %+v, %v", c, err)
	}
	// renewed: still known past the first answer's TTL
	if kb, ok := k.Boot(bootOf(uuids[0]), knownT0.Add(time.Hour+time.Second)); !ok || !kb.Waits {
		t.Fatalf("unchanged machine not renewed: known %v", ok)
	}

	c, err = confirm(uuids[1])
	if err != nil || c.Machine.TargetRevision != 1 || c.Machine.Pool != "workers" {
		t.Fatalf("changed: %+v, %v", c, err)
	}
	if kb, ok := k.Boot(bootOf(uuids[1]), fixedNow()); !ok || kb.Waits || kb.version != 8 {
		t.Fatalf("assigned machine: known %v, waits %v, version %d", ok, kb.Waits, kb.version)
	}

	_, err = confirm(uuids[2])
	if !errs.Is(err, errs.KindUnauthorized) {
		t.Fatalf("refused: %v", err)
	}
	if _, ok := k.Boot(bootOf(uuids[2]), fixedNow()); ok {
		t.Fatal("a refused machine is still known")
	}

	_, err = confirm(uuids[3])
	if !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("registry away: %v", err)
	}
	if _, ok := k.Boot(bootOf(uuids[3]), fixedNow()); !ok {
		t.Fatal("forgotten because the registry was away")
	}
}

// Requests that arrive while a batch is under way go together in the
// next one: the registry gets a few requests, not one per machine.
func TestConfirmWaitsShareBatches(t *testing.T) {
	const n = 60
	k := NewKnownMachines(time.Hour, 10*time.Second)
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	reg := &batchRegistry{}
	reg.answer = func(boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		mu.Lock()
		sizes = append(sizes, len(boots))
		mu.Unlock()
		<-release
		out := make([]regapi.IPXEBootResult, len(boots))
		for i, b := range boots {
			out[i] = regapi.IPXEBootResult{Version: b.Version}
		}
		return out, nil
	}
	reqs := make([]regapi.SelfRegister, n)
	kbs := make([]KnownBoot, n)
	for i := range n {
		reqs[i], kbs[i] = knownWaiting(t, k, fmt.Sprintf("4c4c4544-0035-4b10-8056-%012d", 100+i))
	}
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := k.ConfirmWait(context.Background(), reg, reqs[i], kbs[i], fixedNow, discardLog{})
			if err == nil && c.Machine.UUID != reqs[i].UUID {
				err = fmt.Errorf("request %d answered with machine %s", i, c.Machine.UUID)
			}
			errc <- err
		})
	}
	// Every request is queued or in one of the first batches before any
	// batch is answered.
	eventstest.Eventually(t, "every request queued or under way", 10*time.Second, time.Millisecond, func() (bool, string) {
		k.cmu.Lock()
		queued := len(k.confirmQueue)
		k.cmu.Unlock()
		mu.Lock()
		inFlight := 0
		for _, s := range sizes {
			inFlight += s
		}
		mu.Unlock()
		return queued+inFlight == n, fmt.Sprintf("queued %d, in flight %d of %d", queued, inFlight, n)
	})
	close(release)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(sizes) > 2*confirmFlights {
		t.Fatalf("%d requests took %d batches %v, want at most %d", n, len(sizes), sizes, 2*confirmFlights)
	}
	// A flight gives its place back after it answered its last batch, when
	// it finds the queue empty: the waiters may return before that.
	eventstest.Eventually(t, "every flight ended, the queue empty", 10*time.Second, time.Millisecond, func() (bool, string) {
		k.cmu.Lock()
		defer k.cmu.Unlock()
		return k.confirmFlying == 0 && len(k.confirmQueue) == 0,
			fmt.Sprintf("flights %d, queue %d after every answer", k.confirmFlying, len(k.confirmQueue))
	})
}

// A registry that takes no batches (none answers the subject: a rolling
// upgrade, or a registry without them) has each request ask on its own.
func TestConfirmWaitAloneWithoutBatches(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000051"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	r, kb := knownWaiting(t, k, u)
	if c, err := k.ConfirmWait(context.Background(), &stubRegistry{}, r, kb, fixedNow, discardLog{}); err != nil || !c.Alone {
		t.Fatalf("registry without batches: %+v, %v", c, err)
	}
	reg := &batchRegistry{answer: func([]regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		return nil, fmt.Errorf("no service answers %s: %w", regapi.SubjectReportIPXEBoots, nats.ErrNoResponders)
	}}
	if c, err := k.ConfirmWait(context.Background(), reg, r, kb, fixedNow, discardLog{}); err != nil || !c.Alone {
		t.Fatalf("no responders: %+v, %v", c, err)
	}
}

// A request whose caller gives up does not wait for the batch.
func TestConfirmWaitEndsWithItsRequest(t *testing.T) {
	const u = "4c4c4544-0035-4b10-8056-000000000061"
	k := NewKnownMachines(time.Hour, 10*time.Second)
	r, kb := knownWaiting(t, k, u)
	release := make(chan struct{})
	defer close(release)
	reg := &batchRegistry{answer: func(boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		<-release
		return nil, errors.New("released")
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := k.ConfirmWait(ctx, reg, r, kb, fixedNow, discardLog{}); !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("a request past its deadline: %v", err)
	}
}

// A request that gave up while queued is left out of the next batch: the
// registry confirms no wait that no firmware waits for.
func TestConfirmWaitLeavesOutRequestsThatEnded(t *testing.T) {
	k := NewKnownMachines(time.Hour, 10*time.Second)
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []string
	reg := &batchRegistry{}
	reg.answer = func(boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
		mu.Lock()
		for _, b := range boots {
			sent = append(sent, b.UUID)
		}
		mu.Unlock()
		<-release
		out := make([]regapi.IPXEBootResult, len(boots))
		for i, b := range boots {
			out[i] = regapi.IPXEBootResult{Version: b.Version}
		}
		return out, nil
	}
	var wg sync.WaitGroup
	// Every flight busy with one request each (one after the other, so
	// that no flight takes two).
	for i := range confirmFlights {
		r, kb := knownWaiting(t, k, fmt.Sprintf("4c4c4544-0035-4b10-8056-%012d", 200+i))
		wg.Go(func() {
			if _, err := k.ConfirmWait(context.Background(), reg, r, kb, fixedNow, discardLog{}); err != nil {
				t.Error(err)
			}
		})
		eventstest.Eventually(t, "the flights under way", 10*time.Second, time.Millisecond, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(sent) == i+1, fmt.Sprintf("%d of %d flights under way", len(sent), i+1)
		})
	}
	const gone = "4c4c4544-0035-4b10-8056-000000000299"
	r, kb := knownWaiting(t, k, gone)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.ConfirmWait(ctx, reg, r, kb, fixedNow, discardLog{}); err == nil {
		t.Fatal("a request that ended was answered")
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, u := range sent {
		if u == gone {
			t.Fatalf("the request that ended went to the registry: %v", sent)
		}
	}
	// A flight gives itself back after its last batch's requests were
	// answered: the waiters above may return before it did.
	eventstest.Eventually(t, "every flight back, nothing queued", 10*time.Second, time.Millisecond, func() (bool, string) {
		k.cmu.Lock()
		defer k.cmu.Unlock()
		return k.confirmFlying == 0 && len(k.confirmQueue) == 0, fmt.Sprintf("flights %d, queue %d", k.confirmFlying, len(k.confirmQueue))
	})
}
