package app

import (
	"context"
	"slices"

	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/token"
)

// SelfRegister handles a machine's iPXE boot: the enrollment token decides
// the organization, an unknown UUID becomes a machine, a pre-registered one
// takes over its configuration, and a known one only records the boot.
func (a *App) SelfRegister(ctx context.Context, r api.SelfRegister) (api.SelfRegisterReply, error) {
	p, err := a.VerifyToken(ctx, api.TokenVerify{Token: r.EnrollmentToken, Kind: token.KindEnrollment})
	if err != nil {
		return api.SelfRegisterReply{}, err
	}
	at := r.At
	if at.IsZero() {
		at = a.Now()
	}
	reply, err := a.MachineCommand(ctx, p.Org, r.UUID, 0,
		machine.Register{UUID: r.UUID, MAC: r.MAC, EnrollmentTokenID: p.TokenID, At: at}, machine.RecordIPXEBoot{At: at, RetryIn: r.RetryIn})
	if err != nil {
		return api.SelfRegisterReply{}, err
	}
	return api.SelfRegisterReply{MachineReply: reply, Created: slices.Contains(reply.Events, "machine.registered")}, nil
}
