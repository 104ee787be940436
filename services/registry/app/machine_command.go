package app

import (
	"context"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// MachineCommand runs domain commands on one machine of an organization,
// each deciding on the state the previous ones left, and appends all their
// events at once.
func (a *App) MachineCommand(ctx context.Context, orgID, uuidIn string, expected uint64, cmds ...machine.Command) (api.MachineReply, error) {
	now := a.Now()
	uuid, err := a.machineRef(orgID, uuidIn)
	if err != nil {
		return api.MachineReply{}, withCommandFields(err, cmds, now)
	}
	ref := events.AggregateRef{Org: orgID, Type: machineType, ID: uuid}
	cached := func() (machine.State, uint64) {
		m, err := a.Machines.Model().Get(orgID, uuid)
		if err != nil {
			return machine.State{}, 0
		}
		return m.State.Clone(), m.Version
	}
	state, stored, version, err := decideAndAppend(ctx, a.Store, ref, expected, cached, foldMachine, func(s machine.State) ([]any, error) {
		var all []any
		for _, cmd := range cmds {
			evs, err := machine.Decide(s, cmd, now)
			if err != nil {
				return nil, err
			}
			s = evolveMachine(s, evs)
			all = append(all, evs...)
		}
		return all, nil
	}, evolveMachine)
	if err != nil {
		return api.MachineReply{}, err
	}
	return api.MachineReply{Machine: api.Machine{Org: orgID, State: state}, Version: version, Events: types(stored)}, nil
}

// withCommandFields adds the commands' own field errors to a validation
// error about the org or UUID, so the caller learns about every field at once.
func withCommandFields(err error, cmds []machine.Command, now time.Time) error {
	if !errs.Is(err, errs.KindValidation) {
		return err
	}
	var f errs.Fields
	f.Merge("", err)
	for _, c := range cmds {
		if _, cerr := machine.Decide(machine.State{}, c, now); errs.Is(cerr, errs.KindValidation) {
			for _, fe := range errs.As(cerr).Fields {
				if fe.Field != "uuid" {
					f = append(f, fe)
				}
			}
		}
	}
	return f.Err()
}

// machineRef validates the org and canonicalises the UUID.
func (a *App) machineRef(orgID, uuid string) (string, error) {
	var f errs.Fields
	validOrg(&f, orgID)
	canonical, err := machine.ParseUUID(uuid)
	f.Merge("", err)
	if err := f.Err(); err != nil {
		return "", err
	}
	if _, err := a.Orgs.Get(orgID); err != nil {
		return "", err
	}
	return canonical, nil
}

func evolveMachine(s machine.State, evs []any) machine.State {
	s = s.Clone()
	for _, e := range evs {
		s.Apply(e)
	}
	return s
}

func foldMachine(envs []events.Envelope) (machine.State, error) {
	var s machine.State
	for i := range envs {
		p, err := registry.Decode(&envs[i])
		if err != nil {
			return s, errs.Internal("machine history does not decode at %d: %v", envs[i].Sequence, err)
		}
		s.Apply(p)
	}
	return s, nil
}
