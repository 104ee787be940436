package ports

import (
	"context"
	"net/http"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// MachineRevisions is what the control plane knows of one machine's pool
// revisions, each part from the service that owns it: the registry (which
// revision the machine's agent last reported booting, and which one a
// rollout moves it to), the revisions service (the pool's revisions) and
// the boot service (the reboot instructions it holds for the machine, and
// the machine revision its agent last reported).
type MachineRevisions struct {
	UUID string `json:"uuid"`
	// Pool is the machine's pool; empty when it is unassigned.
	Pool string `json:"pool,omitempty"`
	// CurrentRevision is the pool revision the machine's agent last
	// reported booting (0: none yet); CurrentRevisionAt is when.
	CurrentRevision   uint64    `json:"current_revision"`
	CurrentRevisionAt time.Time `json:"current_revision_at,omitzero"`
	// TargetRevision is the pool revision a rollout is moving the machine
	// to (0: none).
	TargetRevision uint64 `json:"target_revision"`
	// BootedMachineRevision is the machine revision ("mr-…") in the agent's
	// last startup report; empty when its agent never reported.
	BootedMachineRevision string `json:"booted_machine_revision,omitempty"`
	// AppliedRevision is the pool revision last requested for rollout.
	AppliedRevision int `json:"applied_revision"`
	// Revisions are the pool's revisions, oldest first (none when the
	// machine is unassigned or its pool is gone).
	Revisions []MachineRevision `json:"revisions"`
	// Instructions are the reboot instructions the boot service keeps for
	// the machine (its most recent 32), oldest first.
	Instructions []bootapi.Instruction `json:"instructions"`
	// Version is the machine's version (its ETag).
	Version uint64 `json:"version"`
}

// MachineRevision is one of the pool's revisions, marked as the machine's
// current or target one.
type MachineRevision struct {
	rev.RevisionSummary
	Current bool `json:"current,omitempty"`
	Target  bool `json:"target,omitempty"`
}

func (h *handler) bootRoutes() []route {
	const one = "/api/v1/orgs/{org}/machines/{uuid}"
	ref := func(_ context.Context, r *http.Request) (any, error) {
		return bootapi.MachineRef{Org: r.PathValue("org"), UUID: r.PathValue("uuid")}, nil
	}
	return []route{
		{Method: "GET", Path: one + "/revisions", Min: domain.RoleViewer,
			Summary:  "A machine's pool revisions: what it booted and is moving to (registry), its pool's revisions, and its reboot instructions (boot)",
			Response: MachineRevisions{}, Status: 200, Decode: ref,
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return h.machineRevisions(ctx, req.(bootapi.MachineRef))
			}},
		{Method: "GET", Path: one + "/startup-log", Min: domain.RoleViewer,
			Summary:  "A machine's last startup log, as its agent reported it (404 while it never reported)",
			Response: bootapi.StartupLog{}, Status: 200, Decode: ref,
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return bootapi.GetStartupLog(ctx, h.NC, req.(bootapi.MachineRef))
			}},
	}
}

func (h *handler) machineRevisions(ctx context.Context, ref bootapi.MachineRef) (MachineRevisions, error) {
	// The caller's own writes are in the answer (read-your-writes, as
	// every read of the two services through the gateway).
	m, err := h.Registry.GetMachine(ctx, regapi.MachineGet{Org: ref.Org, UUID: ref.UUID, MinVersion: h.writes.last(ctx, marksRegistry)})
	if err != nil {
		return MachineRevisions{}, err
	}
	st := m.Machine
	out := MachineRevisions{UUID: st.UUID, Pool: st.Pool, CurrentRevision: st.CurrentRevision, CurrentRevisionAt: st.CurrentRevisionAt,
		TargetRevision: st.TargetRevision, Revisions: []MachineRevision{}, Instructions: []bootapi.Instruction{}, Version: m.Version}
	ref.UUID = st.UUID // canonical
	if st.Pool != "" {
		list, err := rev.ListRevisions(ctx, h.NC, rev.ListRevisionsRequest{Org: ref.Org, Pool: st.Pool, MinVersion: h.writes.last(ctx, marksRevisions)})
		switch {
		case errs.Is(err, errs.KindNotFound): // assigned to a pool not created yet, or deleted
		case err != nil:
			return MachineRevisions{}, err
		default:
			out.AppliedRevision = list.AppliedRevision
			for _, r := range list.Revisions {
				out.Revisions = append(out.Revisions, MachineRevision{RevisionSummary: r,
					Current: r.Number > 0 && uint64(r.Number) == st.CurrentRevision, Target: r.Number > 0 && uint64(r.Number) == st.TargetRevision})
			}
		}
	}
	instr, err := bootapi.ListInstructions(ctx, h.NC, ref)
	if err != nil {
		return MachineRevisions{}, err
	}
	out.Instructions = append(out.Instructions, instr.Items...)
	logs, err := bootapi.GetStartupLog(ctx, h.NC, ref)
	switch {
	case errs.Is(err, errs.KindNotFound):
	case err != nil:
		return MachineRevisions{}, err
	default:
		out.BootedMachineRevision = logs.BootedRevision
	}
	return out, nil
}
