package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// maxBatch bounds the events one append carries.
const maxBatch = 256

// driver is the process manager of one rollout. Its state is the fold of
// the rollout's events and nothing else: it plans with plan.Next, appends
// the planner's commands and the executors' reports (one writer, so the
// optimistic appends rarely conflict), and keeps one executor running per
// proposed action. Killed at any line, a new driver folds the log and
// continues: every external action is guarded by a step_started that was
// appended before it, and every action is idempotent.
type driver struct {
	a       *App
	org, id string
	log     *slog.Logger

	state   rollout.State
	version uint64
	// issued and withdrawn are the instruction ids whose
	// rollout.reboot_requested / rollout.instruction_withdrawn is in the
	// log (State.Apply ignores those events).
	issued, withdrawn map[string]bool
	// own are ids of events this driver appended, so that their echo on
	// the bus does not cost a catch-up.
	own map[string]bool
	// x appends the driver's decisions: see appendBatch.
	x *aggregate.Executor[*driverFold]

	inbox    chan message
	external chan string // ids of events appended to this rollout, seen on the bus
	execs    map[string]*execution
	// trace is the span context of rollout.started: everything the driver
	// appends and does belongs to the trace of the request that started it.
	trace trace.SpanContext
}

// message is what executors send their driver.
type message struct {
	report  rollout.Command // an outcome to decide and append
	publish events.Payload  // a boot instruction event to append once
	draftID string          // the publish's deterministic event id
	done    chan error      // answered once the publish is in the log
	ended   string          // an executor's key: it returned
}

type execution struct {
	action plan.Action
	cancel context.CancelFunc
}

func (a *App) newDriver(org, id string) *driver {
	d := &driver{
		a: a, org: org, id: id, log: a.Log.With("org", org, "rollout", id),
		issued: map[string]bool{}, withdrawn: map[string]bool{}, own: map[string]bool{},
		inbox: make(chan message, 1024), external: make(chan string, 1024), execs: map[string]*execution{},
	}
	d.x = &aggregate.Executor[*driverFold]{Store: a.Store, Registry: a.Events, Clock: a.now, Retry: a.Retry,
		Initial: newDriverFold,
		Apply: func(f *driverFold, _ *events.Envelope, p any) *driverFold {
			f.apply(p)
			return f
		},
		// The driver is the rollout's one writer and folds every event it
		// sees on the bus, so its copy stands for the log when a batch
		// appends nothing (every command refused, every pub in the log):
		// no read of the log for it, as before the executor. A copy that
		// is stale costs a lost race at the next append.
		Version: func(context.Context, events.AggregateRef) (uint64, error) { return d.version, nil },
	}
	return d
}

// Drive runs the process manager of rollout org/id until the rollout is
// final or ctx ends. Whoever calls it must hold the rollout's lease.
func (a *App) Drive(ctx context.Context, org, id string) error {
	d := a.newDriver(org, id)
	a.drivers.add(org, id, d)
	defer a.drivers.remove(org, id, d)
	defer d.stopAll()
	if err := d.catchUp(ctx); err != nil {
		return err
	}
	if !d.state.Exists() {
		return errs.NotFound("rollout %s does not exist", id)
	}
	d.log.Info("driving rollout", "status", d.state.Status(), "version", d.version, "instance", a.Settings.Instance)
	for {
		dec, err := d.plan(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			d.log.Warn("planning failed; trying again", "err", err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
			if err := d.catchUp(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("reading the rollout failed", "err", err)
			}
			continue
		}
		if dec.Final {
			d.log.Info("rollout finished", "status", d.state.Status())
			return nil
		}
		d.reconcile(ctx, dec.Actions)
		wait := a.Settings.Replan
		if !dec.Wake.IsZero() {
			wait = min(wait, max(dec.Wake.Sub(a.now()), 10*time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case m := <-d.inbox:
			d.handle(ctx, m)
		case eid := <-d.external:
			if d.foreign(eid) {
				if err := d.catchUp(ctx); err != nil && ctx.Err() == nil {
					d.log.Warn("reading the rollout failed", "err", err)
				}
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// foreign drains the bus echoes and reports whether any event was not
// appended by this driver.
func (d *driver) foreign(first string) bool {
	found := !d.own[first]
	delete(d.own, first)
	for {
		select {
		case eid := <-d.external:
			if !d.own[eid] {
				found = true
			}
			delete(d.own, eid)
		default:
			if len(d.own) > 4*maxBatch*4 { // echoes lost on the bus: forget them
				clear(d.own)
			}
			return found
		}
	}
}

// handle takes one message and every other one already waiting, and
// appends what they ask in one batch.
func (d *driver) handle(ctx context.Context, first message) {
	batch := []message{first}
	for len(batch) < maxBatch {
		select {
		case m := <-d.inbox:
			batch = append(batch, m)
			continue
		default:
		}
		break
	}
	var reports []rollout.Command
	var pubs []message
	for _, m := range batch {
		switch {
		case m.ended != "":
			delete(d.execs, m.ended)
		case m.report != nil:
			reports = append(reports, m.report)
		case m.publish != nil:
			pubs = append(pubs, m)
		}
	}
	err := d.appendBatch(ctx, reports, pubs, false)
	for _, p := range pubs {
		p.done <- err
	}
}

// plan asks the planner and appends its commands until it proposes none,
// and returns the last decision.
func (d *driver) plan(ctx context.Context) (plan.Decision, error) {
	for round := 0; ; round++ {
		dec := plan.Next(d.state, d.a.now())
		if len(dec.Commands) == 0 || round >= 64 {
			return dec, nil
		}
		before := d.version
		if err := d.appendBatch(ctx, dec.Commands, nil, true); err != nil {
			return dec, err
		}
		if d.version == before {
			return dec, nil // every command was refused or changed nothing
		}
	}
}

// appendBatch decides cmds on the current state, one after the other, and
// appends their events and pubs in one append, through the aggregate
// executor. Planner commands stop at the first refusal (the next plan
// decides again); reports that are refused are stale (the step moved on)
// and dropped. The decision is made on the driver's own copy; a lost race
// reads the log and decides again.
func (d *driver) appendBatch(ctx context.Context, cmds []rollout.Command, pubs []message, stopAtRefusal bool) error {
	if len(cmds) == 0 && len(pubs) == 0 {
		return nil
	}
	var cached *driverFold
	// onLog tells whether the last decision was made on the log's state
	// rather than the driver's copy; before is that state then, and
	// decided the decision's events: the metrics observe what they end.
	var onLog bool
	var before rollout.State
	var decided int
	actx, span := d.span(ctx, "rollout append")
	res, err := d.x.Execute(actx, aggregate.Command[*driverFold]{Ref: ref(d.org, d.id),
		Cached: func() (*driverFold, uint64, bool) {
			// The instruction sets are the driver's own: the executor adds
			// to them only what it stored, as d.apply would.
			cached = &driverFold{state: d.state.Clone(), issued: d.issued, withdrawn: d.withdrawn}
			return cached, d.version, true
		},
		Decide: func(s *driverFold, now time.Time) ([]any, error) {
			evs := d.decideBatch(s, cmds, pubs, stopAtRefusal, now)
			onLog, decided = s != cached, len(evs)
			if onLog && len(evs) > 0 {
				before = s.state.Clone() // the executor applies the events to s
			}
			return evs, nil
		}})
	span.SetAttributes(attribute.Int("anvil.events", len(res.Stored)))
	span.End()
	if err != nil {
		if cerr := d.catchUp(ctx); cerr != nil {
			return errors.Join(err, cerr)
		}
		return err
	}
	if onLog {
		// The log had events the driver had not folded yet: its state is
		// the log's now.
		if len(res.Stored) > 0 {
			d.a.Metrics.rolloutEvents(before, res.Events[len(res.Events)-decided:])
		}
		for i := range res.Stored {
			d.own[res.Stored[i].ID] = true
		}
		d.state, d.issued, d.withdrawn, d.version = res.State.state, res.State.issued, res.State.withdrawn, res.Version
	} else {
		for i := range res.Stored {
			d.own[res.Stored[i].ID] = true
			d.a.Metrics.rolloutEvent(&d.state, res.Events[i])
			d.apply(res.Events[i])
			d.version = res.Stored[i].Sequence
		}
	}
	if len(res.Stored) > 0 {
		d.a.Metrics.appended(len(res.Stored))
	}
	return nil
}

// decideBatch is appendBatch's decision on s: the events of cmds, each
// decided on what the previous ones left, and the pubs not in the log yet
// (as drafts with their own ids, so that a redelivered one is stored
// once). It does not modify s.
func (d *driver) decideBatch(s *driverFold, cmds []rollout.Command, pubs []message, stopAtRefusal bool, now time.Time) []any {
	st, own := s.state, false // copied before the first event is applied to it
	var out []any
	for i, c := range cmds {
		evs, err := rollout.Decide(st, c, now)
		if err != nil {
			d.log.Debug("command refused", "command", c.CommandType(), "err", err)
			if stopAtRefusal {
				break
			}
			continue
		}
		out = append(out, evs...)
		if len(out) >= maxBatch {
			break
		}
		if len(evs) > 0 && i < len(cmds)-1 {
			if !own {
				st, own = st.Clone(), true
			}
			for _, e := range evs {
				st.Apply(e)
			}
		}
	}
	for _, p := range pubs {
		if s.published(p.publish) {
			continue
		}
		out = append(out, events.Draft{ID: p.draftID, Payload: p.publish})
	}
	return out
}

// driverFold is what the driver folds a rollout's events into: its state,
// and the boot instructions in the log (State.Apply ignores those events).
type driverFold struct {
	state rollout.State
	// issued and withdrawn are the instruction ids whose
	// rollout.reboot_requested / rollout.instruction_withdrawn is in the
	// log.
	issued, withdrawn map[string]bool
}

func newDriverFold() *driverFold {
	return &driverFold{issued: map[string]bool{}, withdrawn: map[string]bool{}}
}

// apply folds one event payload.
func (f *driverFold) apply(p any) { fold(&f.state, f.issued, f.withdrawn, p) }

// fold folds one event payload of a rollout into its state and its sets
// of instructions in the log.
func fold(state *rollout.State, issued, withdrawn map[string]bool, p any) {
	switch e := p.(type) {
	case bootapi.RebootRequested:
		issued[e.InstructionID] = true
	case *bootapi.RebootRequested:
		issued[e.InstructionID] = true
	case bootapi.InstructionWithdrawn:
		withdrawn[e.InstructionID] = true
	case *bootapi.InstructionWithdrawn:
		withdrawn[e.InstructionID] = true
	default:
		state.Apply(p)
	}
}

func (f *driverFold) published(p events.Payload) bool {
	switch e := p.(type) {
	case bootapi.RebootRequested:
		return f.issued[e.InstructionID]
	case bootapi.InstructionWithdrawn:
		return f.withdrawn[e.InstructionID]
	}
	return false
}

// apply folds one event payload into the driver's state.
func (d *driver) apply(p any) { fold(&d.state, d.issued, d.withdrawn, p) }

// catchUp folds the events appended after the driver's version.
func (d *driver) catchUp(ctx context.Context) error {
	f := events.Filter{Org: d.org, AggregateType: AggregateType, AggregateID: d.id}
	return d.a.Store.Replay(ctx, f, events.AtSeq(d.version+1), events.Position{}, func(env *events.Envelope) error {
		if env.Sequence <= d.version {
			return nil
		}
		p, err := d.a.Events.Decode(env)
		if err != nil {
			return fmt.Errorf("rollout %s: event %d (%s): %w", d.id, env.Sequence, env.Type, err)
		}
		if _, ok := p.(rollout.Started); ok && !d.trace.IsValid() {
			d.trace = trace.SpanContextFromContext(events.ExtractTrace(context.Background(), env))
		}
		d.apply(p)
		d.version = env.Sequence
		return nil
	})
}

// reconcile keeps exactly one executor per proposed action.
func (d *driver) reconcile(ctx context.Context, actions []plan.Action) {
	want := make(map[string]plan.Action, len(actions))
	for _, a := range actions {
		want[a.Key()] = a
	}
	for key, ex := range d.execs {
		if _, ok := want[key]; !ok {
			ex.cancel()
			delete(d.execs, key)
		}
	}
	for key, act := range want {
		if _, ok := d.execs[key]; ok {
			continue
		}
		ectx, cancel := context.WithCancel(ctx)
		d.execs[key] = &execution{action: act, cancel: cancel}
		x := d.executor(act)
		ectx, span := d.span(ectx, "rollout "+string(act.Kind), attribute.String("anvil.machine", act.Node), attribute.Int("anvil.attempt", act.Attempt))
		go func() {
			defer cancel()
			defer span.End()
			x.run(ectx)
			select {
			case d.inbox <- message{ended: key}:
			case <-ctx.Done():
			}
		}()
	}
}

// span starts a span in the rollout's trace.
func (d *driver) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if d.trace.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, d.trace)
	}
	attrs = append(attrs, attribute.String("anvil.org", d.org), attribute.String("anvil.rollout", d.id))
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

var tracer = otel.Tracer("github.com/anvil-fleet/anvil/services/rollout/app")

func (d *driver) stopAll() {
	for key, ex := range d.execs {
		ex.cancel()
		delete(d.execs, key)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
