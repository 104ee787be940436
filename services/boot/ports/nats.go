package ports

import (
	"context"
	"errors"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
)

// RegisterQueries serves api.Subjects on srv. The asset query is served
// only by a replica with an assets directory: one that cannot serve the
// files must not answer for the replicas that can (the queue group gives
// each request to one replica), so without any, the caller hears that no
// boot service answers.
func RegisterQueries(srv *command.Server, a *app.App) error {
	err := errors.Join(
		command.Handle(srv, api.SubjectInstructionGet, a.GetInstruction),
		command.Handle(srv, api.SubjectInstructionList, a.ListInstructions),
		command.Handle(srv, api.SubjectStartupLog, a.GetStartupLog),
	)
	if a.Assets != nil {
		err = errors.Join(err, command.Handle(srv, api.SubjectAssetsResolve, a.ResolveAssets))
	}
	return err
}

// InstructionsHandler is the durable name prefix of the instruction
// handlers; one runs per aggregate type in api.InstructionAggregateTypes
// (consumer handler-boot-instructions-<type>).
const InstructionsHandler = "boot-instructions"

// InstructionsInParallel is how many instruction events the handlers
// store at once (never two of one machine): a rollout's reboot
// instructions are all events of its one subject, and storing them one at
// a time (a read and a compare-and-swap of the record, then the ack) had
// bounded a 10,000-machine rollout to ~18 machines a second; at 16 at
// once, the consumer still fell thousands of events behind on two loaded
// cores, its record writes waiting on a busy server.
const InstructionsInParallel = 64

// instructionMachine is an instruction event's ordering key: its machine.
func instructionMachine(_ *events.Envelope, payload any) string {
	switch p := payload.(type) {
	case api.RebootRequested:
		return p.Org + "." + p.UUID
	case api.InstructionWithdrawn:
		return p.Org + "." + p.UUID
	}
	return ""
}

// RevocationsHandler is the durable name of the handler that revokes
// machines' credentials (consumer handler-boot-revocations).
const RevocationsHandler = "boot-revocations"

// RegisterEventHandlers routes RebootRequested and InstructionWithdrawn
// events, and the registry's machine events that revoke credentials
// (app.RevokingEvents), to the app. A payload that can never be valid is
// poisoned at once (it is logged and kept in the POISON stream); anything
// else is retried.
func RegisterEventHandlers(r *handler.Router, a *app.App) {
	var revoking []string
	for _, p := range app.RevokingEvents() {
		revoking = append(revoking, p.(events.Payload).EventType())
	}
	// One consumer shared by the replicas, from the start of the log: a
	// new deployment revokes what the machines' history says is revoked.
	r.Handle(RevocationsHandler, events.Filter{AggregateType: "machine", EventTypes: revoking},
		func(ctx context.Context, env *events.Envelope, payload any) error {
			err := a.RevokeCredentials(ctx, env.Org, env.AggregateID, env.Sequence, env.Time, payload)
			if errs.Is(err, errs.KindValidation) {
				return handler.Permanent(err)
			}
			return err
		})
	for _, aggType := range api.InstructionAggregateTypes {
		r.Handle(InstructionsHandler+"-"+aggType, events.Filter{
			AggregateType: aggType,
			EventTypes:    []string{api.EventTypeRebootRequested, api.EventTypeInstructionWithdrawn},
		}, func(ctx context.Context, env *events.Envelope, payload any) error {
			var err error
			switch p := payload.(type) {
			case api.RebootRequested:
				err = a.StoreInstruction(ctx, env.Org, env.Time, p)
			case api.InstructionWithdrawn:
				err = a.WithdrawInstruction(ctx, env.Org, p)
			default:
				return nil
			}
			if errs.Is(err, errs.KindValidation) {
				return handler.Permanent(err)
			}
			return err
		}, handler.InParallel(InstructionsInParallel, instructionMachine))
	}
}
