package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/agent/client"
)

// maxBodyInLog bounds how much of a malformed response is logged.
const maxBodyInLog = 512

// instructionLoop long-polls for instructions and handles them one at a time:
// first the invalid ones (acked failed), then the valid ones in the order the
// server sent them.
func (a *Agent) instructionLoop(ctx context.Context) {
	a.finishPrevious(ctx)

	bo := a.newBackoff()
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		rctx, cancel := a.requestContext(ctx, a.cfg.PollWait)
		res, err := a.client.PollInstructions(rctx, a.cfg.PollWait)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			delay := retryDelay(err, bo)
			if errors.Is(err, api.ErrMalformed) {
				a.log.Error("boot service sent a malformed instructions response; ignoring it",
					"error", a.redact(err.Error()), "body", a.redact(truncateUTF8(string(res.Body), maxBodyInLog)),
					"attempt", failures, "retry_in", delay.Round(time.Millisecond).String())
			} else {
				a.logCallFailure(a.log, "instructions", err, failures, delay)
			}
			sleep(ctx, delay)
			continue
		}
		if failures > 0 {
			a.log.Info("instructions poll works again", "failed_attempts", failures)
		}
		failures = 0
		bo.reset()

		for _, bad := range res.Invalid {
			a.reject(ctx, bad)
		}
		for _, in := range res.Instructions {
			if ctx.Err() != nil {
				return
			}
			a.handle(ctx, in)
		}
		sleep(ctx, a.cfg.MinPollInterval-time.Since(started))
	}
}

// handle carries out one instruction at most once per id.
func (a *Agent) handle(ctx context.Context, in api.Instruction) {
	log := a.log.With("instruction", in.ID, "kind", string(in.Kind), "revision", in.Revision)

	if prev, ok := a.recent.get(in.ID); ok {
		log.Info("instruction delivered again; repeating its acknowledgement, not executing it", "status", string(prev.Status))
		a.ack(ctx, log, in.ID, prev)
		return
	}
	if last := a.lastActed(); last != nil && last.ID == in.ID {
		prev := api.Ack{Status: last.Outcome, Message: last.Message}
		if prev.Status == "" {
			// Acted on in this boot and still waiting for the reboot.
			prev = api.Ack{Status: api.AckAccepted, Message: "reboot in progress"}
		}
		log.Info("instruction already carried out before the agent restarted; not executing it again", "status", string(prev.Status))
		a.recent.put(in.ID, prev)
		a.ack(ctx, log, in.ID, prev)
		return
	}

	log.Info("instruction received", "issued_at", in.IssuedAt, "booted_revision", a.cfg.BootedRevision)
	if in.Kind == api.KindReboot && in.Revision == a.cfg.BootedRevision {
		a.setPendingTarget("")
		a.finish(ctx, log, in.ID, api.Ack{Status: api.AckSkipped, Message: fmt.Sprintf("revision %s already booted", in.Revision)})
		return
	}
	a.setPendingTarget(in.Revision)

	reason := fmt.Sprintf("instruction %s: %s into revision %s (booted %s)", in.ID, in.Kind, in.Revision, orUnknown(a.cfg.BootedRevision))
	if err := a.ack(ctx, log, in.ID, api.Ack{Status: api.AckAccepted, Message: reason}); err != nil {
		// A refused "accepted" is the server withdrawing the instruction
		// (e.g. the rollout was aborted): do not reboot behind its back. It
		// is not remembered, so a redelivery is evaluated afresh.
		if ctx.Err() == nil {
			log.Error("boot service refused to let the agent accept the instruction; not executing it", "error", a.redact(err.Error()))
		}
		return
	}
	a.recent.put(in.ID, api.Ack{Status: api.AckAccepted, Message: reason})

	// Persist before rebooting: after the reboot, the new agent must know
	// this id was acted on, or a redelivery would reboot the machine again.
	acted := &actedInstruction{
		ID: in.ID, Kind: in.Kind, Revision: in.Revision,
		BootedRevision: a.cfg.BootedRevision, BootID: a.cfg.BootID, ActedAt: time.Now().UTC(),
	}
	if err := a.saveLastActed(acted); err != nil {
		log.Error("cannot persist the instruction before rebooting; refusing to reboot", "state_file", a.cfg.StateFile, "error", err.Error())
		a.finish(ctx, log, in.ID, api.Ack{Status: api.AckFailed, Message: "cannot persist agent state before rebooting: " + err.Error()})
		return
	}

	log.Info("rebooting", "reason", reason)
	if err := a.cfg.Rebooter.Reboot(ctx, reason); err != nil {
		log.Error("reboot failed", "error", err.Error())
		ack := api.Ack{Status: api.AckFailed, Message: "reboot failed: " + err.Error()}
		acted.Outcome, acted.Message = ack.Status, ack.Message
		if err := a.saveLastActed(acted); err != nil {
			log.Error("cannot record the failed reboot in the state file", "error", err.Error())
		}
		a.finish(ctx, log, in.ID, ack)
		return
	}
	// "done" is only known after the reboot; the next agent sends it.
	log.Info("reboot started; waiting to be shut down")
}

// reject answers an instruction the agent cannot understand.
func (a *Agent) reject(ctx context.Context, bad api.InvalidInstruction) {
	if bad.ID == "" {
		a.log.Error("boot service sent an instruction without a usable id; cannot acknowledge it", "reason", a.redact(bad.Reason))
		return
	}
	log := a.log.With("instruction", bad.ID)
	if prev, ok := a.recent.get(bad.ID); ok {
		a.ack(ctx, log, bad.ID, prev)
		return
	}
	log.Error("boot service sent an invalid instruction; acknowledging it as failed", "reason", a.redact(bad.Reason))
	a.finish(ctx, log, bad.ID, api.Ack{Status: api.AckFailed, Message: "invalid instruction: " + bad.Reason})
}

// finishPrevious settles the instruction that the previous agent acted on:
// only now can it be known whether the reboot happened and where it landed.
func (a *Agent) finishPrevious(ctx context.Context) {
	last := a.lastActed()
	if last == nil || last.Outcome != "" {
		return
	}
	log := a.log.With("instruction", last.ID, "kind", string(last.Kind), "revision", last.Revision)

	var ack api.Ack
	rebooted := a.cfg.BootID == "" || last.BootID == "" || a.cfg.BootID != last.BootID
	switch {
	case !rebooted:
		ack = api.Ack{Status: api.AckFailed, Message: fmt.Sprintf("the agent restarted but the machine did not reboot (boot id %s unchanged); still on revision %s", a.cfg.BootID, orUnknown(a.cfg.BootedRevision))}
	case a.cfg.BootedRevision != last.Revision:
		ack = api.Ack{Status: api.AckFailed, Message: fmt.Sprintf("rebooted, but booted revision %s instead of %s", orUnknown(a.cfg.BootedRevision), last.Revision)}
	default:
		ack = api.Ack{Status: api.AckDone, Message: fmt.Sprintf("rebooted into revision %s", last.Revision)}
	}
	done := *last
	done.Outcome, done.Message = ack.Status, ack.Message
	if err := a.saveLastActed(&done); err != nil {
		log.Error("cannot record the instruction's outcome in the state file", "error", err.Error())
	}
	log.Info("settling the instruction acted on before the restart", "status", string(ack.Status), "message", ack.Message)
	a.finish(ctx, log, last.ID, ack)
}

// finish sends a terminal ack and remembers it for redeliveries.
func (a *Agent) finish(ctx context.Context, log *slog.Logger, id string, ack api.Ack) {
	a.recent.put(id, ack)
	_ = a.ack(ctx, log, id, ack)
}

// ack sends an ack, retrying until the server takes it, refuses it for good
// (a 4xx other than auth and rate limits), or ctx ends.
func (a *Agent) ack(ctx context.Context, log *slog.Logger, id string, ack api.Ack) error {
	bo := a.newBackoff()
	for attempt := 1; ; attempt++ {
		rctx, cancel := a.requestContext(ctx, 0)
		err := a.client.Ack(rctx, id, ack)
		cancel()
		if err == nil {
			log.Info("instruction acknowledged", "status", string(ack.Status), "message", ack.Message)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if client.IsPermanent(err) {
			log.Error("boot service refused the acknowledgement", "status", string(ack.Status), "error", a.redact(err.Error()))
			return err
		}
		delay := retryDelay(err, bo)
		a.logCallFailure(log, "ack", err, attempt, delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

func (a *Agent) lastActed() *actedInstruction {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.LastInstruction == nil {
		return nil
	}
	c := *a.state.LastInstruction
	return &c
}

// saveLastActed writes the state file and, only if that worked, the memory copy.
func (a *Agent) saveLastActed(in *actedInstruction) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next := a.state
	c := *in
	next.LastInstruction = &c
	if err := saveState(a.cfg.StateFile, next); err != nil {
		return err
	}
	a.state = next
	return nil
}
