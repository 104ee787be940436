package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// executor carries out one action of one rollout and reports its outcome
// to the driver. It holds a snapshot of what it needs from the state at
// the moment the action was proposed; the driver decides its report
// against the state of the moment the report arrives, so a stale report is
// refused rather than applied.
type executor struct {
	d       *driver
	a       *App
	act     plan.Action
	log     *slog.Logger
	cluster string
	pool    string
	// revision is the rollout's target revision.
	revision uint64
	// machine is the machine's snapshot from the rollout's start, and the
	// step's start and its reboot instruction from the state.
	machine       rollout.Machine
	stepStartedAt time.Time
	instructionID string
	kind          rollout.InstructionKind
	bootIDBefore  string // the node's boot id when it was cordoned
	// wasIssued: the action's instruction was in the log when it began.
	wasIssued bool
	state     rollout.State // the whole state, for the checks
}

func (d *driver) executor(act plan.Action) *executor {
	x := &executor{d: d, a: d.a, act: act, cluster: d.state.Cluster, pool: d.state.Pool, revision: d.state.Revision,
		log: d.log.With("action", string(act.Kind), "machine", act.Node, "attempt", act.Attempt)}
	if m, ok := d.state.Machine(act.Machine); ok {
		x.machine = m.Machine
		x.stepStartedAt = m.StepStartedAt
		x.instructionID, x.kind = m.InstructionID, m.Kind
		x.bootIDBefore = m.NodeBootIDBefore
	}
	x.wasIssued = act.InstructionID != "" && d.issued[act.InstructionID]
	if act.Kind == plan.RunChecks {
		x.state = d.state.Clone()
	}
	return x
}

func (x *executor) run(ctx context.Context) {
	x.a.Metrics.actionStarted(string(x.act.Kind))
	defer x.a.Metrics.actionEnded(string(x.act.Kind))
	switch x.act.Kind {
	case plan.WaitForRollout:
		x.waitForRollout(ctx)
	case plan.RunChecks:
		x.runChecks(ctx)
	case plan.Cordon:
		x.cordon(ctx)
	case plan.Drain:
		x.drain(ctx)
	case plan.IssueReboot:
		x.issueReboot(ctx)
	case plan.ConfirmReboot:
		x.confirmReboot(ctx)
	case plan.WaitBoot:
		x.waitBoot(ctx)
	case plan.WaitReady:
		x.waitReady(ctx)
	case plan.Uncordon:
		x.uncordon(ctx)
	default:
		x.log.Error("unknown action")
	}
}

// report hands an outcome to the driver.
func (x *executor) report(ctx context.Context, c rollout.Command) {
	select {
	case x.d.inbox <- message{report: c}:
	case <-ctx.Done():
	}
}

func (x *executor) succeed(ctx context.Context, msg string) {
	x.report(ctx, rollout.SucceedStep{Machine: x.act.Machine, Step: x.act.Step, Attempt: x.act.Attempt, Message: msg})
}

func (x *executor) fail(ctx context.Context, reason string) {
	x.report(ctx, rollout.FailStep{Machine: x.act.Machine, Step: x.act.Step, Attempt: x.act.Attempt, Reason: reason})
}

// publish appends a boot instruction event to the rollout (once: the
// driver skips an id already in the log) and waits until it is there.
func (x *executor) publish(ctx context.Context, p events.Payload, draftID string) error {
	done := make(chan error, 1)
	select {
	case x.d.inbox <- message{publish: p, draftID: draftID, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry runs try until it is done or ctx ends, waiting for a notification
// on wake (if any) or Settings.Poll between tries. try returns done=true
// when it reported an outcome; an error is logged and tried again.
func (x *executor) retry(ctx context.Context, wake func() <-chan struct{}, try func() (bool, error)) {
	var lastErr string
	for {
		var ch <-chan struct{}
		if wake != nil {
			ch = wake()
		}
		done, err := try()
		if done || ctx.Err() != nil {
			return
		}
		if err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			x.log.Warn("action failed; trying again", "err", err)
		}
		t := time.NewTimer(x.a.Settings.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// permanent reports whether a refusal from another service will not go
// away by trying again.
func permanent(err error) bool {
	var e *errs.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Kind {
	case errs.KindValidation, errs.KindNotFound, errs.KindConflict, errs.KindPrecondition:
		return true
	}
	return false
}
