package adapters

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Registry calls the registry service over NATS; its errors are the
// registry's errs.Error kinds.
type Registry struct{ Client regapi.Client }

// NewRegistry returns a registry client on nc.
func NewRegistry(nc *nats.Conn) Registry { return Registry{Client: regapi.Client{NC: nc}} }

// asMachine records the machine as the actor of what the registry appends
// for its boots and reports (machine:<uuid>), unless ctx names one.
func asMachine(ctx context.Context, uuid string) context.Context {
	if events.Actor(ctx) != "" || uuid == "" {
		return ctx
	}
	return events.WithActor(ctx, "machine:"+strings.ToLower(uuid))
}

func (r Registry) SelfRegister(ctx context.Context, req regapi.SelfRegister) (regapi.SelfRegisterReply, error) {
	return r.Client.SelfRegister(asMachine(ctx, req.UUID), req)
}

// ReportIPXEBoots reports many machines' boots in one request; the
// registry names each machine the actor of what its boot appends.
func (r Registry) ReportIPXEBoots(ctx context.Context, boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error) {
	rep, err := r.Client.ReportIPXEBoots(ctx, regapi.ReportIPXEBoots{Boots: boots})
	return rep.Results, err
}

func (r Registry) GetMachine(ctx context.Context, org, uuid string) (regapi.Machine, error) {
	rep, err := r.Client.GetMachine(ctx, regapi.MachineGet{Org: org, UUID: uuid})
	return rep.Machine, err
}

// GetMachineAt returns the machine as of stream sequence seq or later. It
// reads the registry's projection, waiting briefly for it to apply seq, and
// falls back to rebuilding the machine from the log (an "as of" read,
// which costs a consumer) when the projection stays behind.
func (r Registry) GetMachineAt(ctx context.Context, org, uuid string, seq uint64) (regapi.Machine, error) {
	for range 30 {
		rep, err := r.Client.GetMachine(ctx, regapi.MachineGet{Org: org, UUID: uuid})
		if err == nil && rep.Version >= seq {
			return rep.Machine, nil
		}
		if err != nil && !errs.Is(err, errs.KindNotFound) {
			return regapi.Machine{}, err
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return regapi.Machine{}, err
		}
	}
	rep, err := r.Client.GetMachine(ctx, regapi.MachineGet{Org: org, UUID: uuid, At: strconv.FormatUint(seq, 10)})
	return rep.Machine, err
}

func (r Registry) Heartbeat(ctx context.Context, org, uuid string, at time.Time) error {
	return r.Client.Heartbeat(asMachine(ctx, uuid), regapi.Heartbeat{Org: org, UUID: uuid, At: at})
}

func (r Registry) Command(ctx context.Context, org, uuid string, cmd regapi.MachineCommand) error {
	_, err := r.Client.Machine(asMachine(ctx, uuid), org, uuid, cmd, 0)
	return err
}
