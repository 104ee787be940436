package app

import (
	"context"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app/wire"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// MachineCommand runs domain commands on one machine of an organization,
// each deciding on the state the previous ones left, and appends all their
// events at once.
func (a *App) MachineCommand(ctx context.Context, orgID, uuidIn string, expected uint64, cmds ...machine.Command) (api.MachineReply, error) {
	return a.machineCommand(ctx, orgID, uuidIn, expected, nil, cmds...)
}

// versionFunc reads an aggregate's version, as aggregate.Executor.Version.
type versionFunc = func(ctx context.Context, ref events.AggregateRef) (uint64, error)

// machineCommand is MachineCommand whose decisions on the read model's
// copy that append nothing are confirmed by confirm (nil: App.Versions).
func (a *App) machineCommand(ctx context.Context, orgID, uuidIn string, expected uint64, confirm versionFunc, cmds ...machine.Command) (api.MachineReply, error) {
	now := a.Now()
	cmds = a.withSettings(cmds)
	uuid, err := a.machineRef(orgID, uuidIn)
	if err != nil {
		return api.MachineReply{}, withCommandFields(err, cmds, now)
	}
	ref := events.AggregateRef{Org: orgID, Type: machineType, ID: uuid}
	// last is the machine as it last existed in the decision that stood:
	// what a deletion answers with.
	var last machine.State
	x := a.machines()
	if confirm != nil {
		x.Version = confirm
	}
	res, err := x.Execute(ctx, aggregate.Command[machine.State]{Ref: ref, Expected: expected,
		Cached: func() (machine.State, uint64, bool) {
			m, err := a.Machines.Model().Get(orgID, uuid)
			if err != nil {
				return machine.State{}, 0, true // unknown to the read model: decided on nothing first, then on the log
			}
			return m.State.Clone(), m.Version, true
		},
		Decide: func(s machine.State, now time.Time) ([]any, error) {
			last = s.Clone() // the executor applies the events to s
			var all []any
			for _, cmd := range cmds {
				evs, err := machine.Decide(s, cmd, now)
				if err != nil {
					return nil, err
				}
				s = evolveMachine(s, evs)
				if s.Exists() {
					last = s
				}
				all = append(all, evs...)
			}
			return all, nil
		}})
	if err != nil {
		return api.MachineReply{}, err
	}
	state := res.State
	reply := api.MachineReply{Machine: wire.Machine(orgID, state), Version: res.Version, Events: types(res.Stored)}
	if !state.Exists() && last.Exists() && len(res.Stored) > 0 {
		reply.Machine, reply.Deleted = wire.Machine(orgID, last), true
	}
	if err := a.keepIPXEBoots(ctx, orgID, uuid, cmds, &reply); err != nil {
		return api.MachineReply{}, err
	}
	return reply, nil
}

// withSettings gives commands the registry's settings: how often an iPXE
// boot that changes nothing is recorded (only when boots are kept outside
// the log too; otherwise each is recorded).
func (a *App) withSettings(cmds []machine.Command) []machine.Command {
	out := make([]machine.Command, len(cmds))
	for i, c := range cmds {
		if b, ok := c.(machine.RecordIPXEBoot); ok && a.IPXEBoots != nil {
			b.RecordEvery = a.IPXERecordEvery
			c = b
		}
		out[i] = c
	}
	return out
}

// keepIPXEBoots stores the machine's latest iPXE boot outside the log, so
// that every replica shows it whether the log records it or not, and
// shows it in the reply.
func (a *App) keepIPXEBoots(ctx context.Context, orgID, uuid string, cmds []machine.Command, reply *api.MachineReply) error {
	if a.IPXEBoots == nil || reply.Deleted || reply.Machine.Status == "" {
		return nil
	}
	for _, c := range cmds {
		b, ok := c.(machine.RecordIPXEBoot)
		if !ok {
			continue
		}
		at := b.At.UTC()
		var retryBy time.Time
		if b.RetryIn > 0 {
			retryBy = at.Add(b.RetryIn)
		}
		if err := a.IPXEBoots.Record(ctx, orgID, uuid, at, retryBy); err != nil {
			if slices.Contains(reply.Events, ipxeBooted) {
				continue // the log has it
			}
			return errs.Unavailable("keeping the iPXE boot of machine %s: %v", uuid, err)
		}
		a.Machines.Model().SetIPXEBoot(orgID, uuid, at, retryBy)
		reply.Machine = wire.MachineWithIPXEBoot(reply.Machine, at, retryBy)
	}
	return nil
}

var ipxeBooted = machine.IPXEBooted{}.EventType()

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
