package app

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

var (
	waitConfirmations = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_wait_confirmations_total",
		Help: "/ipxe requests of machines known to wait, confirmed with the registry in a shared batch, by result: unchanged (still waits, as remembered), changed (the registry's newer answer), refused, failed, or alone (asked on its own: the registry takes no batches).",
	}, []string{"result"})
	waitConfirmBatches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_wait_confirmation_batches_total",
		Help: "Batches of waiting machines' /ipxe requests sent to the registry together (requests confirmed divided by this is the mean batch).",
	})
	confirmedUnchanged, confirmedChanged = waitConfirmations.WithLabelValues("unchanged"), waitConfirmations.WithLabelValues("changed")
)

// confirmFlights bound the batches of waiting machines under way at once:
// a request that arrives while they are all out waits for the next one
// with the others that arrived meanwhile, so a fleet waiting in its boot
// loop costs the registry a few requests a round trip, not one a machine.
const confirmFlights = 2

// confirmTimeout bounds one batch's round trip; the requests in it give
// up earlier when their own deadline is sooner.
const confirmTimeout = 10 * time.Second

// waitConfirm is one /ipxe request of a machine remembered as waiting.
type waitConfirm struct {
	boot    regapi.SelfRegister
	version uint64
	done    chan struct{}
	// gone: its request ended before a batch took it (the firmware
	// gave up); it is left out rather than confirmed for no one
	gone atomic.Bool
	// the outcome, set before done closes
	machine regapi.Machine
	changed bool
	err     error
	alone   bool // ask the registry on its own
}

// WaitConfirmation is the registry's answer for a machine remembered as
// waiting.
type WaitConfirmation struct {
	// Machine is the machine as the registry has it now (the remembered
	// one while it did not change).
	Machine regapi.Machine
	// Alone: the registry takes no batches; the request asks on its own.
	Alone bool
}

// ConfirmWait asks the registry whether a machine remembered as waiting
// (kb) still waits, together with every other such request that arrives
// meanwhile: the registry verifies each enrollment token, records each
// boot and confirms each machine against the log as it was after the
// request arrived, as a SelfRegister of its own would. So what an
// operator does (assigning the machine, revoking the token) shows at the
// machine's next request, while a fleet in its boot loop costs the
// registry one request per batch. A refusal is returned as the error a
// SelfRegister would return, and forgets the machine.
func (k *KnownMachines) ConfirmWait(ctx context.Context, reg Registry, boot regapi.SelfRegister, kb KnownBoot, now func() time.Time, log debugLog) (WaitConfirmation, error) {
	br, batches := reg.(BootReporter)
	if !batches {
		waitConfirmations.WithLabelValues("alone").Inc()
		return WaitConfirmation{Alone: true}, nil
	}
	if err := ctx.Err(); err != nil {
		return WaitConfirmation{}, errs.Unavailable("the request ended before the registry was asked: %v", err)
	}
	c := &waitConfirm{boot: boot, version: kb.version, done: make(chan struct{})}
	k.cmu.Lock()
	k.confirmQueue = append(k.confirmQueue, c)
	lead := k.confirmFlying < confirmFlights
	if lead {
		k.confirmFlying++
	}
	k.cmu.Unlock()
	if lead {
		go k.confirmRounds(context.WithoutCancel(ctx), br, now, log)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.gone.Store(true)
		return WaitConfirmation{}, errs.Unavailable("the registry did not confirm the machine's wait in time: %v", ctx.Err())
	}
	switch {
	case c.alone:
		return WaitConfirmation{Alone: true}, nil
	case c.err != nil:
		return WaitConfirmation{}, c.err
	case !c.changed:
		return WaitConfirmation{Machine: kb.Machine}, nil
	}
	return WaitConfirmation{Machine: c.machine}, nil
}

// confirmRounds sends the queued confirmations in batches until none is
// left, then gives its flight back.
func (k *KnownMachines) confirmRounds(ctx context.Context, reg BootReporter, now func() time.Time, log debugLog) {
	for {
		k.cmu.Lock()
		batch := make([]*waitConfirm, 0, min(len(k.confirmQueue), reportBatch))
		taken := 0
		for _, c := range k.confirmQueue {
			if len(batch) == reportBatch {
				break
			}
			taken++
			if c.gone.Load() {
				close(c.done)
				continue
			}
			batch = append(batch, c)
		}
		k.confirmQueue = k.confirmQueue[taken:]
		if len(k.confirmQueue) == 0 {
			k.confirmQueue = nil // let the backing array go
		}
		if len(batch) == 0 {
			k.confirmFlying--
			k.cmu.Unlock()
			return
		}
		k.cmu.Unlock()
		k.confirmBatch(ctx, reg, now, log, batch)
	}
}

// confirmBatch asks the registry about one batch and answers each of its
// requests, keeping what the registry said in memory.
func (k *KnownMachines) confirmBatch(ctx context.Context, reg BootReporter, now func() time.Time, log debugLog, batch []*waitConfirm) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	waitConfirmBatches.Inc()
	req := make([]regapi.ReportedIPXEBoot, len(batch))
	for i, c := range batch {
		req[i] = regapi.ReportedIPXEBoot{SelfRegister: c.boot, Version: c.version}
	}
	t := k.Ticket()
	cctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	results, err := reg.ReportIPXEBoots(cctx, req)
	cancel()
	if err == nil && len(results) != len(batch) {
		err = errs.Internal("the registry answered %d boots with %d results", len(batch), len(results))
	}
	if err != nil {
		alone := command.IsNoResponder(err)
		log.DebugContext(ctx, "waiting machines not confirmed in a batch", "machines", len(batch), "ask_alone", alone, "err", err)
		result := "failed"
		if alone {
			result = "alone"
		}
		waitConfirmations.WithLabelValues(result).Add(float64(len(batch)))
		for _, c := range batch {
			c.alone, c.err = alone, err
		}
		return
	}
	at := now()
	// The answers that keep machines first: forgetting one (a refusal)
	// voids the batch's ticket.
	for i, res := range results {
		c := batch[i]
		switch {
		case res.Error != nil:
		case res.Machine == nil:
			confirmedUnchanged.Inc()
			k.refresh(t, c.boot, res.Version, at)
		default:
			confirmedChanged.Inc()
			c.machine, c.changed = *res.Machine, true
			k.Remember(t, c.boot, regapi.MachineReply{Machine: *res.Machine, Version: res.Version}, at)
		}
	}
	for i, res := range results {
		if res.Error == nil {
			continue
		}
		c := batch[i]
		c.err = res.Error
		if errs.Is(res.Error, errs.KindUnavailable) {
			waitConfirmations.WithLabelValues("failed").Inc()
			continue
		}
		waitConfirmations.WithLabelValues("refused").Inc()
		k.forgetKey(c.boot)
	}
}
