// Package adapters connects the rollout service to the world: the
// registry, revisions and boot services over NATS, workload clusters over
// client-go, leases in JetStream KV, and change notifications from the bus.
package adapters

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
)

// Registry is the registry service's client.
type Registry struct{ C regapi.Client }

// NewRegistry returns the registry adapter.
func NewRegistry(nc *nats.Conn) Registry { return Registry{C: regapi.Client{NC: nc}} }

// PoolMachines lists every machine of a pool, following the pages.
func (r Registry) PoolMachines(ctx context.Context, org, pool string) ([]regapi.Machine, error) {
	var out []regapi.Machine
	req := regapi.MachineList{Org: org, Pool: pool, Limit: 500}
	for {
		page, err := r.C.ListMachines(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" {
			return out, nil
		}
		req.Cursor = page.Next
	}
}

// Machine reads one machine.
func (r Registry) Machine(ctx context.Context, org, uuid string) (regapi.Machine, error) {
	rep, err := r.C.GetMachine(ctx, regapi.MachineGet{Org: org, UUID: uuid})
	return rep.Machine, err
}

// MachineAt reads one machine as of stream sequence seq.
func (r Registry) MachineAt(ctx context.Context, org, uuid string, seq uint64) (regapi.Machine, error) {
	rep, err := r.C.GetMachine(ctx, regapi.MachineGet{Org: org, UUID: uuid, At: strconv.FormatUint(seq, 10)})
	return rep.Machine, err
}

// Command runs one machine command.
func (r Registry) Command(ctx context.Context, org, uuid string, cmd any) (regapi.Machine, error) {
	c, ok := cmd.(regapi.MachineCommand)
	if !ok {
		return regapi.Machine{}, errs.Internal("%T is not a machine command", cmd)
	}
	rep, err := r.C.Machine(ctx, org, uuid, c, 0)
	return rep.Machine, err
}

// Revisions is the revisions service's client.
type Revisions struct{ NC *nats.Conn }

// Pool reads a pool.
func (r Revisions) Pool(ctx context.Context, org, pool string) (revapi.Pool, error) {
	return revapi.GetPool(ctx, r.NC, revapi.GetPoolRequest{Org: org, Name: pool})
}

// PoolAfter reads a pool once the revisions service has applied sequence
// minVersion.
func (r Revisions) PoolAfter(ctx context.Context, org, pool string, minVersion uint64) (revapi.Pool, error) {
	return revapi.GetPool(ctx, r.NC, revapi.GetPoolRequest{Org: org, Name: pool, MinVersion: minVersion})
}

// PoolAt reads a pool as of stream sequence seq.
func (r Revisions) PoolAt(ctx context.Context, org, pool string, seq uint64) (revapi.Pool, error) {
	return revapi.GetPool(ctx, r.NC, revapi.GetPoolRequest{Org: org, Name: pool, At: strconv.FormatUint(seq, 10)})
}

// Revision reads one revision of a pool.
func (r Revisions) Revision(ctx context.Context, org, pool string, n int) (revapi.Revision, error) {
	return revapi.GetRevision(ctx, r.NC, revapi.GetRevisionRequest{Org: org, Pool: pool, Revision: n})
}

// Credentials reads a cluster's kubeconfig.
func (r Revisions) Credentials(ctx context.Context, org, cluster string) (revapi.ClusterCredentials, error) {
	return revapi.GetClusterCredentials(ctx, r.NC, revapi.ClusterCredentialsRequest{Org: org, Cluster: cluster})
}

// Boot is the boot service's client.
type Boot struct{ NC *nats.Conn }

// Follow does nothing: Boot always asks (FollowedBoot follows).
func (Boot) Follow(string, string) func() { return func() {} }

// Instruction reads one reboot instruction's status.
func (b Boot) Instruction(ctx context.Context, org, uuid, id string) (bootapi.Instruction, error) {
	return command.Call[bootapi.InstructionRef, bootapi.Instruction](ctx, b.NC, bootapi.SubjectInstructionGet,
		bootapi.InstructionRef{Org: org, UUID: uuid, InstructionID: id})
}
