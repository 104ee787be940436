// Package ports serves the registry's application over NATS.
package ports

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
)

// Register serves every registry subject on srv.
func Register(srv *command.Server, a *app.App) error {
	// The contract's commands (api.MachineCommands), each decoded into the
	// domain's: machines register only through self_register, which checks
	// the enrollment token.
	for _, zero := range api.MachineCommands() {
		name := zero.CommandType()
		err := command.Handle(srv, api.MachineSubject(name), func(ctx context.Context, r api.MachineRequest) (api.MachineReply, error) {
			cmd, err := wire.MachineCommand(name, r.Command)
			if err != nil {
				return api.MachineReply{}, prefix(err, "command")
			}
			return a.MachineCommand(ctx, r.Org, r.UUID, r.ExpectedVersion, cmd)
		})
		if err != nil {
			return err
		}
	}
	return firstErr(
		command.Handle(srv, api.SubjectRegister, a.SelfRegister),
		command.Handle(srv, api.SubjectReportIPXEBoots, a.ReportIPXEBoots),
		command.Handle(srv, api.SubjectHeartbeat, func(ctx context.Context, r api.Heartbeat) (struct{}, error) {
			return struct{}{}, a.Heartbeat(ctx, r)
		}),
		// the hot reads answer with the read model's pre-encoded JSON
		command.HandleAppend(srv, api.SubjectMachineGet, a.GetMachineJSON),
		command.HandleAppend(srv, api.SubjectMachineList, a.ListMachinesJSON),
		command.Handle(srv, api.SubjectOrgCreate, a.CreateOrg),
		command.Handle(srv, api.SubjectOrgRename, a.RenameOrg),
		command.Handle(srv, api.SubjectOrgGet, a.GetOrg),
		command.Handle(srv, api.SubjectOrgList, a.ListOrgs),
		command.Handle(srv, api.SubjectTokenIssue, a.IssueToken),
		command.Handle(srv, api.SubjectTokenList, a.ListTokens),
		command.Handle(srv, api.SubjectTokenRevoke, a.RevokeToken),
		command.Handle(srv, api.SubjectTokenVerify, a.VerifyToken),
	)
}

// prefix puts a nested request's field errors under its field name.
func prefix(err error, field string) error {
	var f errs.Fields
	f.Merge(field, err)
	if e := f.Err(); e != nil {
		return e
	}
	return err
}

func firstErr(errors ...error) error {
	for _, err := range errors {
		if err != nil {
			return err
		}
	}
	return nil
}
