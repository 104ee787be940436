package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/clock"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields/values"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/machineop"
)

// Operations is the read model of the one-machine operations.
type Operations interface {
	Get(org, id string) (OperationSnapshot, bool)
	// Running lists the operations that are not over.
	Running() []OperationSnapshot
	// ForMachine lists a machine's operations, newest first.
	ForMachine(org, uuid string) []OperationSnapshot
	List(org string) []OperationSnapshot
}

// OperationSnapshot is one machine operation as the read model holds it.
type OperationSnapshot struct {
	Org     string
	State   machineop.State
	Version uint64
}

// MachineOperationTriggers are the registry events that start (or cancel)
// a machine operation.
var MachineOperationTriggers = []string{
	"machine.maintenance_requested", "machine.maintenance_exited", "machine.unassign_started",
	"machine.deletion_started", "machine.deletion_aborting", "machine.force_unassigned", "machine.deleted",
}

// OperationIDFor is the id of the operation a registry event starts:
// deterministic, so that a redelivered event finds it.
func OperationIDFor(eventID string) string { return "op-" + RolloutIDFor(eventID)[3:] }

// StartMachineOperation starts the operation a registry event asks for.
// Idempotent: the operation's id comes from the event's.
func (a *App) StartMachineOperation(ctx context.Context, env *events.Envelope, payload any) error {
	var kind machineop.Kind
	switch env.Type {
	case "machine.maintenance_requested":
		kind = machineop.KindMaintenanceEnter
	case "machine.maintenance_exited":
		kind = machineop.KindMaintenanceExit
	case "machine.unassign_started":
		kind = machineop.KindUnassign
	case "machine.deletion_started":
		kind = machineop.KindDeletion
		if e, ok := deref(payload).(regapi.DeletionStarted); ok {
			if e.Policy == regapi.DeletionUnsafe {
				kind = machineop.KindDeletionFinish
			}
		}
	case "machine.deleted":
		e, ok := deref(payload).(regapi.Deleted)
		if !ok || e.Policy != regapi.DeletionForced {
			return nil // a graceful or unsafe deletion removed the node on its way
		}
		// The registry removed it at once, whatever it was doing; its
		// Node is left.
		kind = machineop.KindForcedDeletionCleanup
	case "machine.force_unassigned":
		kind = machineop.KindForceUnassignCleanup
	case "machine.deletion_aborting":
		kind = machineop.KindDeletionAbort
		if err := a.cancelOperations(ctx, env.Org, env.AggregateID, machineop.KindDeletion, "the deletion was aborted"); err != nil {
			return err
		}
	default:
		return nil
	}
	id := OperationIDFor(env.ID)
	r := events.AggregateRef{Org: env.Org, Type: machineop.AggregateType, ID: id}
	x := a.operations()
	existing, version, err := x.Load(ctx, r)
	if err != nil {
		return err
	}
	if version != 0 {
		return nil // started by an earlier delivery: no need to ask the other services again
	}
	var m regapi.Machine
	if kind.BestEffort() && env.Sequence > 1 {
		// The machine as it was just before the event: a forced deletion
		// removed it, a force-unassign took its pool away.
		m, err = a.Registry.MachineAt(ctx, env.Org, env.AggregateID, env.Sequence-1)
	} else {
		m, err = a.Registry.Machine(ctx, env.Org, env.AggregateID)
	}
	if err != nil {
		if permanent(err) {
			return nil // gone: nothing to do
		}
		return err
	}
	if e, ok := deref(payload).(regapi.ForceUnassigned); ok && e.Pool != "" {
		m.Pool = e.Pool
	}
	if kind.BestEffort() && (m.Pool == "" || !mayHaveNode(m.Status)) {
		return nil // in no pool, so in no cluster; or it never joined
	}
	started := machineop.Started{ID: id, Kind: kind, Machine: env.AggregateID, Node: nodeName(m), Pool: m.Pool,
		DrainTimeout: values.DefaultDrainTimeout.Std(), Cause: env.Type + " " + env.ID, At: a.now()}
	if m.Pool != "" {
		p, err := a.Revisions.Pool(ctx, env.Org, m.Pool)
		switch {
		case err == nil:
			started.Cluster = p.Cluster
			if st, err := poolStrategy(p.Spec.Rollout); err == nil {
				st = st.WithDefaults()
				started.DrainTimeout = st.DrainTimeout.Std()
				if g := st.DrainGracePeriod; g != nil {
					gp := g.Std()
					started.GracePeriod = &gp
				}
			}
		case !permanent(err):
			return err
		}
	}
	started.Steps = machineop.StepsOf(kind, started.Cluster != "")
	if len(started.Steps) == 0 {
		return nil // a clean-up with no cluster to clean
	}
	if err := started.Validate(); err != nil {
		return err
	}
	res, err := x.Execute(ctx, aggregate.Command[machineop.State]{Ref: r,
		Cached: func() (machineop.State, uint64, bool) { return existing, version, true },
		Decide: func(s machineop.State, _ time.Time) ([]any, error) {
			if s.Exists() {
				return nil, nil // started by a concurrent delivery
			}
			return []any{started}, nil
		}})
	if err != nil {
		return err
	}
	if len(res.Stored) > 0 {
		a.Log.InfoContext(ctx, "machine operation started", "org", env.Org, "operation", id, "kind", kind, "machine", env.AggregateID)
	}
	return nil
}

// cancelOperations cancels the machine's running operations of kind.
func (a *App) cancelOperations(ctx context.Context, org, uuid string, kind machineop.Kind, reason string) error {
	if a.Operations == nil {
		return nil
	}
	for _, op := range a.Operations.ForMachine(org, uuid) {
		if op.State.Kind != kind || op.State.Status.Final() {
			continue
		}
		r := events.AggregateRef{Org: org, Type: machineop.AggregateType, ID: op.State.ID}
		_, err := a.Store.Append(ctx, r, events.Any, events.Draft{ID: "cancel-" + op.State.ID, Payload: machineop.Cancelled{Reason: reason, At: a.now()}})
		if err != nil {
			return err
		}
	}
	return nil
}

// DriveOperation runs one machine operation to its end (or until ctx
// ends). Whoever calls it holds its lease. Every step is idempotent, and
// each is recorded as started before its action: a new driver re-drives
// the current step.
func (a *App) DriveOperation(ctx context.Context, org, id string) error {
	r := events.AggregateRef{Org: org, Type: machineop.AggregateType, ID: id}
	x := a.operations()
	st, version, err := x.Load(ctx, r)
	if err != nil {
		return err
	}
	load := func() error {
		s, v, err := x.Load(ctx, r)
		if err == nil {
			st, version = s, v
		}
		return err
	}
	// execute appends what decide makes of the operation, deciding on the
	// driver's copy first and again on the log after a lost race. It
	// returns the events appended. Nothing to append on the copy reads
	// nothing: the executor would confirm that on the log, and a drain
	// reports the same blocked pod on every pass.
	execute := func(decide func(s machineop.State, now time.Time) []any) ([]any, error) {
		if len(decide(st, a.now())) == 0 {
			return nil, nil
		}
		res, err := x.Execute(ctx, aggregate.Command[machineop.State]{Ref: r,
			Cached: func() (machineop.State, uint64, bool) {
				s := st
				s.Log = slices.Clip(s.Log) // the executor appends to its copy's log
				return s, version, true
			},
			Decide: func(s machineop.State, now time.Time) ([]any, error) { return decide(s, now), nil }})
		if err != nil {
			return nil, err
		}
		st, version = res.State, res.Version
		return res.Events, nil
	}
	// drainFailed observes a drain that failed once the failure is in the
	// log, so that it is recorded once.
	drainFailed := func(evs []any, stepAt time.Time) {
		for _, e := range evs {
			if f, ok := e.(machineop.Failed); ok && f.Step == machineop.StepDrain {
				a.Metrics.operationDrain("failed", stepAt, f.At)
			}
		}
	}
	for ctx.Err() == nil {
		if st.Status.Final() {
			return nil
		}
		evs, act := machineop.Next(st, a.now())
		if len(evs) > 0 {
			if f, failed := evs[0].(machineop.Failed); failed {
				// Told before the failure is in the log: a driver that
				// stops in between tells it again.
				if err := a.reportOperationFailure(ctx, org, st, f.Reason); err != nil {
					a.Log.Warn("reporting a failed operation", "operation", id, "err", err)
				}
			}
			var stepAt time.Time
			appended, err := execute(func(s machineop.State, now time.Time) []any {
				stepAt = s.StepAt
				evs, _ := machineop.Next(s, now)
				return evs
			})
			if err != nil {
				if err := load(); err != nil && ctx.Err() == nil {
					_ = clock.Sleep(ctx, a.Settings.Poll)
				}
				continue
			}
			drainFailed(appended, stepAt)
			continue
		}
		if !act {
			return nil
		}
		step := st.Step()
		// outcome appends the outcome of step unless the operation moved
		// on meanwhile (it was cancelled, say).
		outcome := func(e any, stepAt *time.Time) ([]any, error) {
			return execute(func(s machineop.State, _ time.Time) []any {
				if s.Status.Final() || s.Step() != step || !s.Running {
					return nil
				}
				if stepAt != nil {
					*stepAt = s.StepAt
				}
				return []any{e}
			})
		}
		sctx, cancel := context.WithDeadline(ctx, st.Deadline)
		msg, err := a.runOperationStep(sctx, org, st, func(b machineop.DrainBlocked) {
			_, _ = execute(func(s machineop.State, _ time.Time) []any {
				if s.Status.Final() || s.Step() != machineop.StepDrain || !s.Running {
					return nil
				}
				if s.Blocked == nil || s.Blocked.Pod != b.Pod || b.At.Sub(s.Blocked.At) >= time.Minute {
					return []any{b}
				}
				return nil
			})
		})
		cancel()
		switch {
		case err == nil:
			var stepAt time.Time
			appended, err := outcome(machineop.StepSucceeded{Step: step, Message: msg, At: a.now()}, &stepAt)
			switch {
			case err != nil:
				_ = load()
			case len(appended) > 0 && step == machineop.StepDrain:
				a.Metrics.operationDrain("succeeded", stepAt, a.now())
			}
		case permanent(err):
			f := machineop.Failed{Step: step, Reason: err.Error(), At: a.now()}
			if rerr := a.reportOperationFailure(ctx, org, st, f.Reason); rerr != nil {
				a.Log.Warn("reporting a failed operation", "operation", id, "err", rerr)
			}
			var stepAt time.Time
			appended, err := outcome(f, &stepAt)
			if err != nil {
				_ = load()
			} else {
				drainFailed(appended, stepAt)
			}
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.Log.Warn("machine operation step failed; trying again", "operation", id, "step", step, "err", err)
			// Look for a cancellation, then try again.
			if err := load(); err == nil && !st.Status.Final() {
				_ = clock.Sleep(ctx, a.Settings.Poll)
			}
		}
	}
	return ctx.Err()
}

// runOperationStep carries out one step.
func (a *App) runOperationStep(ctx context.Context, org string, st machineop.State, blocked func(machineop.DrainBlocked)) (string, error) {
	var cl Cluster
	if st.Cluster != "" {
		c, err := a.Clusters.Cluster(ctx, org, st.Cluster)
		if err != nil {
			return "", err
		}
		cl = c
	}
	switch st.Step() {
	case machineop.StepCordon:
		_, err := cl.Cordon(ctx, st.Node, "operation/"+st.ID)
		if errs.KindOf(err) == errs.KindNotFound {
			return "node " + st.Node + " does not exist; nothing to cordon", nil
		}
		return "node cordoned", err
	case machineop.StepDrain:
		err := cl.Drain(ctx, st.Node, DrainOptions{GracePeriod: st.GracePeriod, Blocked: func(pod, budget, msg string) {
			now := a.now()
			blocked(machineop.DrainBlocked{Pod: pod, Budget: budget, Message: msg, WaitedFor: now.Sub(st.StepAt), At: now})
		}})
		if errs.KindOf(err) == errs.KindNotFound {
			return "node " + st.Node + " does not exist; nothing to drain", nil
		}
		return "no evictable pod left", err
	case machineop.StepUncordon:
		return "node uncordoned", cl.Uncordon(ctx, st.Node, nil)
	case machineop.StepDeleteNode:
		if err := cl.DeleteNode(ctx, st.Node); err != nil {
			return "", err
		}
		return fmt.Sprintf("node %s deleted from cluster %s (or it was not there)", st.Node, st.Cluster), nil
	case machineop.StepPrepared:
		_, err := a.Registry.Command(ctx, org, st.Machine, regapi.CompleteDeletionPreparation{})
		return "the drain is done; the deletion can no longer be aborted", err
	case machineop.StepComplete:
		var cmd any
		switch st.Kind {
		case machineop.KindMaintenanceEnter:
			cmd = regapi.CompleteMaintenanceEntry{}
		case machineop.KindUnassign:
			cmd = regapi.CompleteUnassign{}
		case machineop.KindDeletion, machineop.KindDeletionFinish:
			cmd = regapi.CompleteDeletion{}
		case machineop.KindDeletionAbort:
			cmd = regapi.CompleteDeletionAbort{}
		default:
			return "", nil
		}
		_, err := a.Registry.Command(ctx, org, st.Machine, cmd)
		return "the registry completed the machine's transition", err
	}
	return "", errs.Internal("unknown step %q", st.Step())
}

// reportOperationFailure tells the registry that the transition failed.
// A best-effort clean-up has no transition to fail: it is logged, and the
// operation's log says what is left to do.
func (a *App) reportOperationFailure(ctx context.Context, org string, st machineop.State, reason string) error {
	if st.Kind.BestEffort() {
		a.Log.WarnContext(ctx, "a node could not be removed after its machine left", "org", org, "operation", st.ID,
			"kind", st.Kind, "machine", st.Machine, "node", st.Node, "cluster", st.Cluster, "reason", reason)
		return nil
	}
	reason = fmt.Sprintf("operation %s (%s): %s", st.ID, st.Kind, reason)
	var cmd any
	switch st.Kind {
	case machineop.KindMaintenanceEnter, machineop.KindUnassign:
		cmd = regapi.MarkFailed{Reason: reason, Step: string(st.Step())}
	case machineop.KindDeletion, machineop.KindDeletionFinish, machineop.KindDeletionAbort:
		cmd = regapi.FailDeletion{Reason: reason}
	default:
		return nil
	}
	_, err := a.Registry.Command(ctx, org, st.Machine, cmd)
	if permanent(err) {
		return nil
	}
	return err
}

// mayHaveNode reports whether a machine in status st may have joined its
// cluster (pre-registered, unassigned and pending machines never did).
func mayHaveNode(st regapi.Status) bool {
	switch st {
	case regapi.StatusPreregistered, regapi.StatusReadyUnassigned, regapi.StatusPending:
		return false
	}
	return true
}
