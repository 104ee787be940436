package ports

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/machineop"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
)

func registerOperations(srv *command.Server, a *app.App) error {
	return errors.Join(
		command.Handle(srv, api.SubjectOperationGet, func(ctx context.Context, r api.GetRequest) (api.Operation, error) {
			if err := app.CheckRef(r.Org, r.ID); err != nil {
				return api.Operation{}, err
			}
			if op, ok := machineOperation(a, r.Org, r.ID); ok {
				return op, nil
			}
			v, err := a.GetRollout(ctx, r.Org, r.ID, r.At, r.MinVersion, false)
			if err != nil {
				return api.Operation{}, err
			}
			return operationOf(v, true), nil
		}),
		command.Handle(srv, api.SubjectOperationList, func(ctx context.Context, r api.ListRequest) (api.OperationList, error) {
			if err := app.CheckOrg(r.Org); err != nil {
				return api.OperationList{}, err
			}
			if r.Kind == "" {
				return listAllOperations(a, r)
			}
			if r.Kind != api.KindRollout {
				return listMachineOperations(a, r)
			}
			vs, next, err := a.ListRollouts(r.Org, app.ListFilter{Pool: r.Pool, Status: r.Status, Cursor: r.Cursor, Limit: r.Limit})
			if err != nil {
				return api.OperationList{}, err
			}
			out := api.OperationList{Items: make([]api.Operation, 0, len(vs)), Next: next}
			for _, v := range vs {
				out.Items = append(out.Items, operationOf(v, false))
			}
			return out, nil
		}),
		command.Handle(srv, api.SubjectOperationLog, func(ctx context.Context, r api.LogRequest) (api.LogPage, error) {
			if err := app.CheckLogPage(r.Org, r.ID, r.After, r.Limit, r.Wait, api.MaxLogWait); err != nil {
				return api.LogPage{}, err
			}
			if page, ok := machineOperationLog(ctx, a, r); ok {
				return page, nil
			}
			s, err := a.RolloutLog(ctx, r.Org, r.ID, r.After, r.Limit, min(r.Wait, api.MaxLogWait))
			if err != nil {
				return api.LogPage{}, err
			}
			return api.LogPage{Entries: mapSlice(s.Entries, entryToAPI), Next: s.Next, Status: s.Status, Final: s.Final}, nil
		}),
	)
}

func operationOf(v app.RolloutView, withRollout bool) api.Operation {
	status := string(v.View.Status)
	if v.View.Aborting {
		status = "aborting"
	}
	op := api.Operation{
		Org: v.Org, ID: v.View.ID, Kind: api.KindRollout, Pool: v.View.Pool, Status: status, Reason: v.View.Reason,
		Progress: progressToAPI(v.View.Progress), StartedAt: v.View.StartedAt, FinishedAt: v.View.FinishedAt, UpdatedAt: v.UpdatedAt,
		Version: v.Version, LogLength: v.LogLength, Conditions: mapSlice(v.View.Conditions, conditionToAPI),
		LastProgressAt: v.View.LastProgressAt, EstimatedDoneAt: v.View.EstimatedDoneAt,
	}
	if withRollout {
		r := toAPI(v)
		op.Rollout = &r
	}
	return op
}

// machineOperation reads a one-machine operation (maintenance, unassign,
// deletion) from its read model.
func machineOperation(a *app.App, org, id string) (api.Operation, bool) {
	if a.Operations == nil {
		return api.Operation{}, false
	}
	snap, ok := a.Operations.Get(org, id)
	if !ok {
		return api.Operation{}, false
	}
	return machineOperationOf(snap, true), true
}

func machineOperationOf(snap app.OperationSnapshot, withLog bool) api.Operation {
	st := snap.State
	op := api.Operation{
		Org: snap.Org, ID: st.ID, Kind: string(st.Kind), Pool: st.Pool, Machine: st.Machine, Node: st.Node,
		Status: string(st.Status), Reason: st.Reason, Step: string(st.Step()), StartedAt: st.At, FinishedAt: st.FinishedAt,
		UpdatedAt: st.UpdatedAt, Version: snap.Version, LogLength: len(st.Log),
		Progress: api.Progress{Total: 1},
	}
	if st.Running {
		op.StepStatus = "running"
	}
	op.LastProgressAt = st.UpdatedAt
	if !st.Status.Final() {
		op.Conditions = machineOperationConditions(st)
	}
	switch st.Status {
	case machineop.StatusSucceeded:
		op.Progress.Done = 1
	case machineop.StatusFailed:
		op.Progress.Failed = 1
	case machineop.StatusCancelled:
		op.Progress.Released = 1
	default:
		op.Progress.InProgress = 1
	}
	if withLog {
		for _, e := range st.Log {
			op.Log = append(op.Log, api.Entry{At: e.At, Machine: st.Machine, Node: st.Node, Step: api.Step(e.Step), Outcome: e.Outcome, Message: e.Message})
		}
	}
	return op
}

func listMachineOperations(a *app.App, r api.ListRequest) (api.OperationList, error) {
	out := api.OperationList{Items: []api.Operation{}}
	if a.Operations == nil {
		return out, nil
	}
	limit := r.Limit
	if limit <= 0 || limit > app.MaxLimit {
		limit = app.DefaultLimit
	}
	started := r.Cursor == ""
	for _, snap := range a.Operations.List(r.Org) {
		if !started {
			started = snap.State.ID == r.Cursor
			continue
		}
		if r.Kind != "machine" && string(snap.State.Kind) != r.Kind || r.Pool != "" && snap.State.Pool != r.Pool ||
			r.Status != "" && string(snap.State.Status) != r.Status {
			continue
		}
		if len(out.Items) == limit {
			out.Next = out.Items[len(out.Items)-1].ID
			break
		}
		out.Items = append(out.Items, machineOperationOf(snap, false))
	}
	return out, nil
}

// machineOperationLog pages a machine operation's log; with Wait it waits
// for a new entry as a rollout's log does.
func machineOperationLog(ctx context.Context, a *app.App, r api.LogRequest) (api.LogPage, bool) {
	if a.Operations == nil {
		return api.LogPage{}, false
	}
	deadline := time.Now().Add(min(r.Wait, api.MaxLogWait))
	for {
		ch := a.Notify.C(app.RolloutKey(r.Org, r.ID))
		op, ok := machineOperation(a, r.Org, r.ID)
		if !ok {
			return api.LogPage{}, false
		}
		limit := r.Limit
		if limit <= 0 {
			limit = 1000
		}
		after := min(r.After, len(op.Log))
		end := min(after+limit, len(op.Log))
		final := op.Status != string(machineop.StatusRunning)
		page := api.LogPage{Entries: op.Log[after:end], Next: end, Status: op.Status, Final: final && end == len(op.Log)}
		if end > after || page.Final || r.Wait <= 0 || !time.Now().Before(deadline) {
			return page, true
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return page, true
		}
	}
}

// machineOperationConditions says what a one-machine operation is doing
// and, when a budget holds its drain, which pod and budget.
func machineOperationConditions(st machineop.State) []api.Condition {
	var out []api.Condition
	if b := st.Blocked; b != nil && st.Running && st.Step() == machineop.StepDrain {
		out = append(out, api.Condition{Type: operation.ConditionDrainBlocked, Status: "True", Reason: "PodDisruptionBudget",
			Message: fmt.Sprintf("pod %s cannot be evicted: PodDisruptionBudget %s refuses it (draining since %s)", b.Pod, b.Budget, st.StepAt.UTC().Format(time.RFC3339))})
	}
	msg := fmt.Sprintf("step %s (%d of %d)", st.Step(), st.Current+1, len(st.Steps))
	if st.Running {
		msg += ", deadline " + st.Deadline.UTC().Format(time.RFC3339)
	}
	return append(out, api.Condition{Type: operation.ConditionProgressing, Status: "True", Reason: "StepRunning", Message: msg, Until: st.Deadline})
}

// listAllOperations lists rollouts and one-machine operations together,
// newest first: the default of GET /operations.
func listAllOperations(a *app.App, r api.ListRequest) (api.OperationList, error) {
	limit := r.Limit
	if limit < 0 || limit > app.MaxLimit {
		return api.OperationList{}, errs.Invalid("limit", "must be between 1 and %d", app.MaxLimit)
	}
	if limit == 0 {
		limit = app.DefaultLimit
	}
	var all []api.Operation
	for _, v := range a.Rollouts.List(r.Org) {
		if r.Pool == "" || v.View.Pool == r.Pool {
			all = append(all, operationOf(v, false))
		}
	}
	if a.Operations != nil {
		for _, snap := range a.Operations.List(r.Org) {
			if r.Pool == "" || snap.State.Pool == r.Pool {
				all = append(all, machineOperationOf(snap, false))
			}
		}
	}
	slices.SortStableFunc(all, func(x, y api.Operation) int {
		if c := y.StartedAt.Compare(x.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	out := api.OperationList{Items: []api.Operation{}}
	started := r.Cursor == ""
	for _, op := range all {
		if !started {
			started = op.ID == r.Cursor
			continue
		}
		if r.Status != "" && op.Status != r.Status && !(r.Status == "active" && !finalStatus(op.Status)) {
			continue
		}
		if len(out.Items) == limit {
			out.Next = out.Items[len(out.Items)-1].ID
			break
		}
		out.Items = append(out.Items, op)
	}
	if !started {
		return api.OperationList{}, errs.Invalid("cursor", "is not an operation of this list")
	}
	return out, nil
}

func finalStatus(s string) bool {
	switch s {
	case "succeeded", "aborted", "cancelled", "failed":
		return true
	}
	return false
}
