// Package wire translates between the registry's domain and its contract
// (services/registry/api), one function per direction: what the registry
// answers and publishes is made from its domain types here, and what other
// services send is turned into domain commands here. The api types are
// never the domain's: wire_test.go checks that each encodes exactly as its
// domain counterpart, so a change to either that the other misses fails a
// test instead of another service's decoding.
package wire

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
)

// Machine is s, a machine of organization org, as the API shows it. The
// times the log keeps apart from the state (created, updated, last seen)
// are the caller's to set.
func Machine(orgID string, s machine.State) api.Machine {
	m := api.Machine{
		Org: orgID, UUID: s.UUID, Status: api.Status(s.Status), Hostname: s.Hostname, NodeName: s.NodeName,
		Labels: s.Labels, Pool: s.Pool, UpgradeIndex: s.UpgradeIndex, ControlPlane: s.ControlPlane,
		MAC: s.MAC, EnrollmentTokenID: s.EnrollmentTokenID, RegisteredAt: s.RegisteredAt,
		CurrentRevision: s.CurrentRevision, CurrentRevisionAt: s.CurrentRevisionAt, TargetRevision: s.TargetRevision,
		MaintenanceReturn:  api.Status(s.MaintenanceReturn),
		HardwareReportedAt: s.HardwareReportedAt,
		Reboot:             api.Reboot{Required: s.Reboot.Required, Reason: s.Reboot.Reason},
		Connectivity:       api.Connectivity(s.Connectivity), ConnectivitySince: s.ConnectivitySince,
		LastIPXEBootAt: s.LastIPXEBootAt, IPXERetryBy: s.IPXERetryBy, LastIgnitionAt: s.LastIgnitionAt,
	}
	if f := s.Failure; f != nil {
		m.Failure = &api.Failure{Reason: f.Reason, During: api.Status(f.During), Step: f.Step}
	}
	if d := s.Deletion; d != nil {
		m.Deletion = &api.Deletion{Policy: api.DeletionPolicy(d.Policy), Phase: api.DeletionPhase(d.Phase),
			Prepared: d.Prepared, PreviousStatus: api.Status(d.PreviousStatus), Reason: d.Reason}
	}
	if h := s.Hardware; h != nil {
		hw := api.Hardware{CPUs: h.CPUs, RAMBytes: h.RAMBytes}
		if h.Disks != nil {
			hw.Disks = make([]api.Disk, len(h.Disks))
			for i, d := range h.Disks {
				hw.Disks[i] = api.Disk{Name: d.Name, SizeBytes: d.SizeBytes}
			}
		}
		if h.NICs != nil {
			hw.NICs = make([]api.NIC, len(h.NICs))
			for i, n := range h.NICs {
				hw.NICs[i] = api.NIC{Name: n.Name, MAC: n.MAC}
			}
		}
		m.Hardware = &hw
	}
	return m
}

// State is m as the domain holds it: the inverse of Machine, for the
// domain's rules on a machine the API answered.
func State(m api.Machine) machine.State {
	s := machine.State{
		UUID: m.UUID, Status: machine.Status(m.Status), Hostname: m.Hostname, NodeName: m.NodeName,
		Labels: m.Labels, Pool: m.Pool, UpgradeIndex: m.UpgradeIndex, ControlPlane: m.ControlPlane,
		MAC: m.MAC, EnrollmentTokenID: m.EnrollmentTokenID, RegisteredAt: m.RegisteredAt,
		CurrentRevision: m.CurrentRevision, CurrentRevisionAt: m.CurrentRevisionAt, TargetRevision: m.TargetRevision,
		MaintenanceReturn:  machine.Status(m.MaintenanceReturn),
		HardwareReportedAt: m.HardwareReportedAt,
		Reboot:             machine.Reboot{Required: m.Reboot.Required, Reason: m.Reboot.Reason},
		Connectivity:       machine.Connectivity(m.Connectivity), ConnectivitySince: m.ConnectivitySince,
		LastIPXEBootAt: m.LastIPXEBootAt, IPXERetryBy: m.IPXERetryBy, LastIgnitionAt: m.LastIgnitionAt,
	}
	if f := m.Failure; f != nil {
		s.Failure = &machine.Failure{Reason: f.Reason, During: machine.Status(f.During), Step: f.Step}
	}
	if d := m.Deletion; d != nil {
		s.Deletion = &machine.Deletion{Policy: machine.DeletionPolicy(d.Policy), Phase: machine.DeletionPhase(d.Phase),
			Prepared: d.Prepared, PreviousStatus: machine.Status(d.PreviousStatus), Reason: d.Reason}
	}
	if h := m.Hardware; h != nil {
		hw := machine.Hardware{CPUs: h.CPUs, RAMBytes: h.RAMBytes}
		if h.Disks != nil {
			hw.Disks = make([]machine.Disk, len(h.Disks))
			for i, d := range h.Disks {
				hw.Disks[i] = machine.Disk{Name: d.Name, SizeBytes: d.SizeBytes}
			}
		}
		if h.NICs != nil {
			hw.NICs = make([]machine.NIC, len(h.NICs))
			for i, n := range h.NICs {
				hw.NICs[i] = machine.NIC{Name: n.Name, MAC: n.MAC}
			}
		}
		s.Hardware = &hw
	}
	return s
}

// MachineWithIPXEBoot is m as it shows an iPXE boot that the log left
// out; machine.State.WithIPXEBoot decides what that changes.
func MachineWithIPXEBoot(m api.Machine, at, retryBy time.Time) api.Machine {
	s := State(m).WithIPXEBoot(at, retryBy)
	m.LastIPXEBootAt, m.IPXERetryBy = s.LastIPXEBootAt, s.IPXERetryBy
	return m
}

// TokenInfo is a token as the API lists it.
func TokenInfo(t org.TokenInfo) api.TokenInfo {
	return api.TokenInfo{ID: t.ID, Kind: api.TokenKind(t.Kind), Name: t.Name, Role: api.Role(t.Role),
		IssuedAt: t.IssuedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, Status: api.TokenStatus(t.Status),
		MaxMachines: t.MaxMachines, RegisteredMachines: t.RegisteredMachines}
}

// commandTypes are the domain's machine commands by name.
var commandTypes = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, zero := range machine.CommandTypes() {
		m[zero.(machine.Command).CommandType()] = reflect.TypeOf(zero)
	}
	return m
}()

// MachineCommand decodes the JSON of an api machine command of type
// commandType (strictly: an unknown field is an error naming it) into the
// domain's command of that name.
func MachineCommand(commandType string, body json.RawMessage) (machine.Command, error) {
	t, ok := commandTypes[commandType]
	if !ok {
		return nil, errs.Invalid("command", "unknown machine command %q", commandType)
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	ptr := reflect.New(t)
	if err := command.Decode(body, ptr.Interface()); err != nil {
		return nil, err
	}
	return ptr.Elem().Interface().(machine.Command), nil
}
