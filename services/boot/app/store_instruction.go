package app

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// StoreInstruction handles a RebootRequested event (eventOrg and eventTime
// are the envelope's): it stores the instruction as pending on the
// machine's record, where the agent's long poll picks it up. It is
// idempotent, as event handlers must be: an instruction id the record
// already holds changes nothing, so a redelivered event is never delivered
// twice. A request that can never be valid is a validation error (the
// caller poisons the event).
func (a *App) StoreInstruction(ctx context.Context, eventOrg string, eventTime time.Time, p api.RebootRequested) error {
	uuid, err := ipxe.ParseUUID(p.UUID)
	var f errs.Fields
	if err != nil || uuid != p.UUID {
		f.Add("uuid", "must be a lowercase canonical SMBIOS UUID")
	}
	if p.Org != eventOrg {
		f.Add("org", "must be the event's organization %q", eventOrg)
	}
	n := record.NewInstruction{
		ID: p.InstructionID, Kind: p.Kind, Pool: p.Pool, Revision: p.Revision,
		MachineRevisionID: p.MachineRevisionID, Reason: p.Reason, ExpiresAt: p.ExpiresAt,
		Trace: traceOf(ctx),
	}
	f.Merge("", record.ValidateInstruction(n))
	if err := f.Err(); err != nil {
		return err
	}
	if eventTime.IsZero() {
		eventTime = a.Now()
	}
	// received apart from stored tells a late delivery of the event from a
	// slow store of it.
	observeInstructionWait("received", eventTime, a.Now())
	stored := false
	_, err = a.Records.Update(ctx, p.Org, p.UUID, func(r *record.Record) (bool, error) {
		stored = r.AddInstruction(n, eventTime, a.Settings.InstructionTTL)
		return stored, nil
	})
	if err != nil {
		return asUnavailable(err, "the boot records")
	}
	if stored {
		// The machine reboots into what it is to boot now: its next /ipxe
		// asks the registry rather than memory.
		a.forgetKnown(p.Org, p.UUID)
		instructionEvents.WithLabelValues("stored").Inc()
		observeInstructionWait("stored", eventTime, a.Now())
		a.Log.InfoContext(ctx, "instruction stored for delivery", "org", p.Org, "uuid", p.UUID, "instruction", p.InstructionID,
			"kind", p.Kind, "pool", p.Pool, "revision", p.Revision)
	} else {
		instructionEvents.WithLabelValues("duplicate").Inc()
		a.Log.DebugContext(ctx, "instruction already known; not stored again", "org", p.Org, "uuid", p.UUID, "instruction", p.InstructionID)
	}
	return nil
}

// WithdrawInstruction handles an InstructionWithdrawn event.
func (a *App) WithdrawInstruction(ctx context.Context, eventOrg string, p api.InstructionWithdrawn) error {
	var f errs.Fields
	if uuid, err := ipxe.ParseUUID(p.UUID); err != nil || uuid != p.UUID {
		f.Add("uuid", "must be a lowercase canonical SMBIOS UUID")
	}
	if p.Org != eventOrg {
		f.Add("org", "must be the event's organization %q", eventOrg)
	}
	if !record.InstructionID(p.InstructionID) {
		f.Add("instruction_id", "is not a valid instruction id")
	}
	if err := f.Err(); err != nil {
		return err
	}
	now := a.Now()
	_, err := a.Records.Update(ctx, p.Org, p.UUID, func(r *record.Record) (bool, error) {
		return r.Withdraw(p.InstructionID, p.Reason, now), nil
	})
	if err != nil {
		return asUnavailable(err, "the boot records")
	}
	instructionEvents.WithLabelValues("withdrawn").Inc()
	a.Log.InfoContext(ctx, "instruction withdrawn", "org", p.Org, "uuid", p.UUID, "instruction", p.InstructionID, "reason", p.Reason)
	return nil
}

// traceOf is ctx's W3C trace context as a map, to keep with a record.
func traceOf(ctx context.Context) map[string]string {
	m := events.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, m)
	if len(m) == 0 {
		return nil
	}
	return map[string]string(m)
}
