package app

import (
	"context"
	"errors"
	"slices"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/enrollment"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// SelfRegister handles a machine's iPXE boot: the enrollment token decides
// the organization, an unknown UUID becomes a machine, a pre-registered one
// takes over its configuration, and a known one only records the boot.
//
// A registration (not the boot of a registered machine) must fit the
// token's limits: its max_machines and the registration rate. The count
// is taken before the machine is registered, so that concurrent
// registrations on any replica never exceed the cap, and given back when
// the registration did not happen. A token without limits (no cap, and
// no rate configured) is not counted: nothing then serializes its
// registrations.
func (a *App) SelfRegister(ctx context.Context, r api.SelfRegister) (api.SelfRegisterReply, error) {
	p, err := a.VerifyToken(ctx, api.TokenVerify{Token: r.EnrollmentToken, Kind: api.KindEnrollment})
	if err != nil {
		return api.SelfRegisterReply{}, err
	}
	return a.selfRegister(ctx, r, p, nil)
}

// selfRegister is SelfRegister once the token is verified (p). confirm,
// when set, confirms a decision on the read model's copy instead of
// App.Versions (see machineCommand).
func (a *App) selfRegister(ctx context.Context, r api.SelfRegister, p api.Principal, confirm versionFunc) (api.SelfRegisterReply, error) {
	at := r.At
	if at.IsZero() {
		at = a.Now()
	}
	limits := a.enrollmentLimits(p)
	limited := a.Enrollment != nil && (limits.MaxMachines > 0 || limits.Rate > 0)
	admitted := false
	if limited && a.registers(p.Org, r.UUID) {
		if err := a.admit(ctx, p, limits, r.UUID); err != nil {
			return api.SelfRegisterReply{}, err
		}
		admitted = true
	}
	reply, err := a.machineCommand(ctx, p.Org, r.UUID, 0, confirm,
		machine.Register{UUID: r.UUID, MAC: r.MAC, EnrollmentTokenID: p.TokenID, At: at}, machine.RecordIPXEBoot{At: at, RetryIn: r.RetryIn})
	created := err == nil && slices.Contains(reply.Events, registered)
	switch {
	case admitted && !created:
		// Registered meanwhile, or refused: a lost release only leaves
		// the count one too high, never over the cap.
		_ = a.Enrollment.Release(context.WithoutCancel(ctx), p.Org, p.TokenID, limits, a.Now())
	case created && !admitted && limited:
		// The read model still showed the machine (deleted just now):
		// the registration counts all the same.
		_ = a.Enrollment.Count(context.WithoutCancel(ctx), p.Org, p.TokenID, a.registeredWith(p.Org, p.TokenID))
	}
	if err != nil {
		return api.SelfRegisterReply{}, err
	}
	return api.SelfRegisterReply{MachineReply: reply, Created: created}, nil
}

var registered = machine.Registered{}.EventType()

// registers reports whether a boot of machine uuid in org would register
// it (it is unknown, or pre-registered), as far as the read model knows.
// A malformed UUID registers nothing: the command refuses it.
func (a *App) registers(org, uuid string) bool {
	if _, err := machine.ParseUUID(uuid); err != nil {
		return false
	}
	m, err := a.Machines.Model().Get(org, uuid)
	return err != nil || m.Status == machine.StatusPreregistered
}

// admit counts a registration against the token's limits, or refuses it
// with a problem that says which limit, and what to do.
func (a *App) admit(ctx context.Context, p api.Principal, l enrollment.Limits, uuid string) error {
	err := a.Enrollment.Admit(ctx, p.Org, p.TokenID, l, a.Now(), a.registeredWith(p.Org, p.TokenID))
	var capped *enrollment.CapReached
	var limited *enrollment.RateLimited
	switch {
	case errors.As(err, &capped):
		return errs.Forbidden("enrollment token %s may not register machine %s: %v; issue another enrollment token to register more machines",
			describeToken(p), uuid, capped)
	case errors.As(err, &limited):
		return errs.RateLimited(limited.RetryAfter, "enrollment token %s may not register machine %s now: %v", describeToken(p), uuid, limited)
	}
	return err
}

func (a *App) enrollmentLimits(p api.Principal) enrollment.Limits {
	l := enrollment.Limits{Rate: a.EnrollmentRate, Burst: a.EnrollmentBurst}
	if v, ok := a.Orgs.ByToken(p.TokenID); ok {
		l.MaxMachines = v.State.Tokens[p.TokenID].MaxMachines
	}
	return l
}

// registeredWith counts the machines registered with a token that has no
// usage stored yet (a new token, or a bucket that was lost).
func (a *App) registeredWith(org, tokenID string) func() int {
	return func() int { return a.Machines.Model().CountRegisteredWith(org, tokenID) }
}

func describeToken(p api.Principal) string {
	if p.Name == "" {
		return p.TokenID
	}
	return p.TokenID + " (" + p.Name + ")"
}
