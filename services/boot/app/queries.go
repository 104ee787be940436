package app

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// GetInstruction answers cmd.boot.instruction.get: what became of one
// instruction (the rollout service polls it to see the agent's ack).
func (a *App) GetInstruction(ctx context.Context, q api.InstructionRef) (api.Instruction, error) {
	var f errs.Fields
	uuid := checkMachineRef(&f, q.Org, q.UUID)
	if !record.InstructionID(q.InstructionID) {
		f.Add("instruction_id", "is not a valid instruction id")
	}
	if err := f.Err(); err != nil {
		return api.Instruction{}, err
	}
	rec, err := a.Records.Get(ctx, q.Org, uuid)
	if err != nil {
		return api.Instruction{}, asUnavailable(err, "the boot records")
	}
	in, ok := rec.Instruction(q.InstructionID)
	if !ok {
		return api.Instruction{}, errs.NotFound("instruction %s of machine %s is not known", q.InstructionID, uuid)
	}
	return in.View(q.Org, uuid), nil
}

// ListInstructions answers cmd.boot.instruction.list.
func (a *App) ListInstructions(ctx context.Context, q api.MachineRef) (api.InstructionList, error) {
	var f errs.Fields
	uuid := checkMachineRef(&f, q.Org, q.UUID)
	if err := f.Err(); err != nil {
		return api.InstructionList{}, err
	}
	rec, err := a.Records.Get(ctx, q.Org, uuid)
	if err != nil {
		return api.InstructionList{}, asUnavailable(err, "the boot records")
	}
	out := api.InstructionList{Items: []api.Instruction{}}
	for _, in := range rec.Instructions {
		out.Items = append(out.Items, in.View(q.Org, uuid))
	}
	return out, nil
}

// GetStartupLog answers cmd.boot.machine.startup_log.
func (a *App) GetStartupLog(ctx context.Context, q api.MachineRef) (api.StartupLog, error) {
	var f errs.Fields
	uuid := checkMachineRef(&f, q.Org, q.UUID)
	if err := f.Err(); err != nil {
		return api.StartupLog{}, err
	}
	return a.StartupLogs.Get(ctx, q.Org, uuid)
}

// checkMachineRef validates an org and a UUID and returns the UUID in
// canonical form.
func checkMachineRef(f *errs.Fields, org, uuid string) string {
	checkOrg(f, org)
	id, err := ipxe.ParseUUID(uuid)
	if err != nil {
		f.Add("uuid", "%v", err)
	}
	return id
}

// checkOrg validates an organization id with the rule every service
// shares (fields.OrgID, the registry's organization id).
func checkOrg(f *errs.Fields, org string) {
	if err := fields.OrgID(org); err != nil {
		f.Add("org", "%v", err)
	}
}
