package app

import (
	"context"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// AckInstruction handles POST .../instructions/{id}/ack. Acks are
// idempotent. "accepted" for an instruction that is no longer pending
// (settled, superseded, withdrawn, expired) is a conflict (409): the agent
// then does not reboot, which is how a withdrawal reaches it. A terminal ack
// after the boot service settled the instruction is recorded as the agent's
// confirmation.
func (a *App) AckInstruction(ctx context.Context, ag Agent, id string, ack agentapi.Ack) error {
	agentRequests.WithLabelValues("ack").Inc()
	if !record.InstructionID(id) {
		return errs.NotFound("instruction %q is not known for this machine", id)
	}
	status := api.InstructionStatus(ack.Status)
	switch status {
	case api.StatusAccepted, api.StatusDone, api.StatusSkipped, api.StatusFailed:
	default:
		return errs.Invalid("status", "must be accepted, done, skipped or failed")
	}
	now := a.Now()
	rec, err := a.update(ctx, ag.Record, func(r *record.Record) (bool, error) {
		expired := r.Expire(now)
		changed, err := r.Ack(id, status, ack.Message, now)
		return changed || expired, err
	})
	switch {
	case err == nil:
		instructionEvents.WithLabelValues("acked_" + string(status)).Inc()
		if in, ok := rec.Instruction(id); ok && status == api.StatusAccepted && in.AcceptedAt.Equal(now) {
			observeInstructionWait("accepted", in.IssuedAt, now)
		}
		a.Log.InfoContext(ctx, "instruction acknowledged", "org", ag.Org, "uuid", ag.UUID, "instruction", id, "status", string(status), "message", ack.Message)
		return nil
	case errs.KindOf(err) == errs.KindInternal:
		return asUnavailable(err, "the boot records")
	}
	a.Log.WarnContext(ctx, "instruction acknowledgement refused", "org", ag.Org, "uuid", ag.UUID, "instruction", id, "status", string(status), "err", err)
	return err
}
