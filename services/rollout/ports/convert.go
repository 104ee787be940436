package ports

import (
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// The domain's view of a rollout, translated into the contract's plain
// types: one function per type, from the domain to the api (nothing reads
// the api types back into the domain). The JSON is the domain types' byte
// for byte (convert_test.go), so answers did not change when the api
// stopped re-exporting the domain.

func toAPI(v app.RolloutView) api.Rollout {
	return api.Rollout{Org: v.Org, View: viewToAPI(v.View), Cluster: v.Cluster, Strategy: strategyToAPI(v.Strategy),
		RequestedBy: v.RequestedBy, UpdatedAt: v.UpdatedAt, Version: v.Version}
}

func viewToAPI(v operation.View) api.View {
	return api.View{
		ID: v.ID, Kind: v.Kind, Pool: v.Pool, Revision: v.Revision, Rollback: v.Rollback, After: v.After,
		Status: api.Status(v.Status), Aborting: v.Aborting, Reason: v.Reason, Refused: v.Refused,
		Progress: progressToAPI(v.Progress), Machines: mapSlice(v.Machines, machineToAPI),
		Excluded: mapSlice(v.Excluded, exclusionToAPI), Checks: mapSlice(v.Checks, checkToAPI),
		StartedAt: v.StartedAt, FinishedAt: v.FinishedAt, Conditions: mapSlice(v.Conditions, conditionToAPI),
		LastProgressAt: v.LastProgressAt, EstimatedDoneAt: v.EstimatedDoneAt, Log: mapSlice(v.Log, entryToAPI),
	}
}

func progressToAPI(p operation.Progress) api.Progress {
	return api.Progress{Done: p.Done, Total: p.Total, InProgress: p.InProgress, Failed: p.Failed, Released: p.Released,
		NotStarted: p.NotStarted}
}

func machineToAPI(m operation.Machine) api.Machine {
	out := api.Machine{
		MachineReport: api.MachineReport{UUID: m.UUID, Hostname: m.Hostname, Outcome: api.Outcome(m.Outcome),
			Node: api.NodeState(m.Node), Rebooted: m.Rebooted, Step: api.Step(m.Step), Reason: m.Reason},
		Phase: api.Phase(m.Phase), StepStatus: api.StepStatus(m.StepStatus), Attempt: m.Attempt, Deadline: m.Deadline,
	}
	if b := m.Blocked; b != nil {
		out.Blocked = &api.DrainBlock{Pod: b.Pod, Budget: b.Budget, WaitedFor: b.WaitedFor, Message: b.Message, At: b.At}
	}
	return out
}

func exclusionToAPI(e rollout.Exclusion) api.Exclusion {
	return api.Exclusion{UUID: e.UUID, Hostname: e.Hostname, Reason: e.Reason}
}

func checkToAPI(c rollout.CheckResult) api.CheckResult {
	return api.CheckResult{Name: c.Name, Passed: c.Passed, Reason: c.Reason, Machine: c.Machine}
}

func conditionToAPI(c operation.Condition) api.Condition {
	return api.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, Until: c.Until}
}

func entryToAPI(e operation.Entry) api.Entry {
	return api.Entry{At: e.At, Machine: e.Machine, Node: e.Node, Step: api.Step(e.Step), Outcome: e.Outcome, Message: e.Message}
}

func strategyToAPI(s rollout.Strategy) api.Strategy {
	out := api.Strategy{
		MaxUnavailable: s.MaxUnavailable, Pause: s.Pause, DrainTimeout: s.DrainTimeout,
		NodeReadyTimeout: s.NodeReadyTimeout, CordonTimeout: s.CordonTimeout, RebootTimeout: s.RebootTimeout,
		UncordonTimeout: s.UncordonTimeout, RemediationMaxInFlight: s.RemediationMaxInFlight,
	}
	if g := s.DrainGracePeriod; g != nil {
		d := *g
		out.DrainGracePeriod = &d
	}
	if r := s.Remediation; r != nil {
		c := *r
		out.Remediation = &c
	}
	if s.MaintenanceWindows != nil {
		out.MaintenanceWindows = append(out.MaintenanceWindows[:0:0], s.MaintenanceWindows...)
	}
	return out
}

// mapSlice converts every element, keeping nil nil: a nil list and an
// empty one encode differently (null, []).
func mapSlice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}
