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
	"github.com/anvil-fleet/anvil/libs/events/clock"
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
	// readAt is when the driver last read the log to its end. The bus's
	// notices are hints: one that is lost (a reconnect, a read that failed
	// after it) must not leave the driver on a stale state, so it reads
	// the log on its own once Replan passed without a read.
	readAt time.Time
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
		Apply: func(f *driverFold, env *events.Envelope, p any) *driverFold {
			f.stored(env, p)
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
//
// Each turn decides, in one append, the executors' reports that arrived
// and what the planner proposes on the state they leave (a step's outcome
// and the next step's start go out together), then starts the executors
// of the steps now recorded as started, and waits for the next report, an
// event appended by someone else, or the planner's wake-up.
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
	var reports []rollout.Command
	var pubs []message
	for {
		before := d.version
		err := d.appendBatch(ctx, reports, pubs)
		for _, p := range pubs {
			p.done <- err
		}
		reports, pubs = nil, nil
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			d.log.Warn("planning failed; trying again", "err", err)
			if err := clock.Sleep(ctx, time.Second); err != nil {
				return err
			}
			continue
		}
		dec := plan.Next(d.state, a.now())
		if dec.Final {
			d.log.Info("rollout finished", "status", d.state.Status())
			return nil
		}
		d.reconcile(ctx, dec.Actions)
		if len(dec.Commands) > 0 && d.version != before {
			continue // a batch was full: the rest goes in the next one
		}
		wait := a.Settings.Replan
		if !dec.Wake.IsZero() {
			wait = min(wait, max(dec.Wake.Sub(a.now()), 10*time.Millisecond))
		}
		timer := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case m := <-d.inbox:
				reports, pubs = d.take(m)
			case eid := <-d.external:
				if !d.foreign(eid) {
					continue // the echo of its own append: nothing new to plan on
				}
				if err := d.catchUp(ctx); err != nil && ctx.Err() == nil {
					d.log.Warn("reading the rollout failed", "err", err)
				}
			case <-timer.C:
				if time.Since(d.readAt) >= a.Settings.Replan {
					if err := d.catchUp(ctx); err != nil && ctx.Err() == nil {
						d.log.Warn("reading the rollout failed", "err", err)
					}
				}
			}
			break waiting
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

// take takes one message and every other one already waiting (up to a
// batch): the reports to decide and the boot instructions to publish.
func (d *driver) take(first message) (reports []rollout.Command, pubs []message) {
	m, n := first, 0
	for {
		switch {
		case m.ended != "":
			delete(d.execs, m.ended)
		case m.report != nil:
			reports = append(reports, m.report)
		case m.publish != nil:
			pubs = append(pubs, m)
		}
		if n++; n >= maxBatch {
			return reports, pubs
		}
		select {
		case m = <-d.inbox:
		default:
			return reports, pubs
		}
	}
}

// appendBatch decides reports, then what the planner proposes on the
// state they leave (round after round, until it proposes nothing new or
// the batch is full), and appends their events and pubs in one append,
// through the aggregate executor. Reports that are refused are stale (the
// step moved on) and dropped; the planner's commands stop at the first
// refusal (the next plan decides again).
//
// The decision is made on the driver's own state, to which each event is
// applied as it is decided, so that the next command is decided on what
// it leaves: nothing copies the whole pool. What the append did not store
// is reverted; when the log had moved on, the executor decides again on
// the log's state, which becomes the driver's.
func (d *driver) appendBatch(ctx context.Context, reports []rollout.Command, pubs []message) error {
	cached := &driverFold{state: &d.state, issued: d.issued, withdrawn: d.withdrawn, version: d.version, own: true}
	actx, span := d.span(ctx, "rollout append")
	res, err := d.x.Execute(actx, aggregate.Command[*driverFold]{Ref: ref(d.org, d.id),
		Cached: func() (*driverFold, uint64, bool) { return cached, d.version, true },
		Decide: func(f *driverFold, now time.Time) ([]any, error) {
			if f != cached {
				cached.revert() // the log moved on: its state replaces the driver's
			}
			return d.decideBatch(f, reports, pubs, now), nil
		}})
	cached.revert()
	span.SetAttributes(attribute.Int("anvil.events", len(res.Stored)))
	span.End()
	for i := range res.Stored {
		d.own[res.Stored[i].ID] = true
	}
	if len(res.Stored) > 0 {
		d.a.Metrics.appended(len(res.Stored))
	}
	if err == nil && res.State != nil && res.State != cached {
		d.state, d.issued, d.withdrawn, d.version = *res.State.state, res.State.issued, res.State.withdrawn, res.Version
		return nil
	}
	d.version = cached.version
	if err != nil {
		if cerr := d.catchUp(ctx); cerr != nil {
			return errors.Join(err, cerr)
		}
	}
	return err
}

// decideBatch is appendBatch's decision on f: the events of the reports
// and of the planner's commands, each decided on what the previous ones
// left and applied to f's state ahead of the append, then the pubs not in
// the log yet (as drafts with their own ids, so that a redelivered one is
// stored once).
func (d *driver) decideBatch(f *driverFold, reports []rollout.Command, pubs []message, now time.Time) []any {
	var out []any
	// decide reports whether c was accepted and how many events it made.
	decide := func(c rollout.Command) (bool, int) {
		evs, err := rollout.Decide(*f.state, c, now)
		if err != nil {
			d.log.Debug("command refused", "command", c.CommandType(), "err", err)
			return false, 0
		}
		for _, e := range evs {
			f.applyAhead(e, d.a.Metrics.observation(f.state, e))
		}
		out = append(out, evs...)
		return true, len(evs)
	}
	for _, c := range reports {
		if len(out) >= maxBatch {
			break
		}
		decide(c)
	}
	for round := 0; round < 64 && len(out) < maxBatch; round++ {
		made := 0
		for _, c := range plan.Next(*f.state, now).Commands {
			ok, n := decide(c)
			made += n
			if !ok || len(out) >= maxBatch {
				break
			}
		}
		if made == 0 {
			break
		}
	}
	for _, p := range pubs {
		if f.published(p.publish) {
			continue
		}
		out = append(out, events.Draft{ID: p.draftID, Payload: p.publish})
	}
	return out
}

// driverFold is what the driver folds a rollout's events into: its state,
// and the boot instructions in the log (State.Apply ignores those events).
type driverFold struct {
	state *rollout.State
	// issued and withdrawn are the instruction ids whose
	// rollout.reboot_requested / rollout.instruction_withdrawn is in the
	// log.
	issued, withdrawn map[string]bool
	// ahead are the events the decision applied to state before their
	// append, oldest first: the executor's Apply takes them as stored
	// instead of applying them again.
	ahead []aheadEvent
	// own: state is the driver's, to be reverted to what the log holds;
	// version is the log's version of it.
	own     bool
	version uint64
}

// aheadEvent is an event applied ahead of its append: what takes it back,
// and the metrics it records once stored.
type aheadEvent struct {
	undo    rollout.Reversal
	observe func()
}

func newDriverFold() *driverFold {
	return &driverFold{state: &rollout.State{}, issued: map[string]bool{}, withdrawn: map[string]bool{}}
}

// stored folds one stored event: an event applied ahead is only taken as
// stored.
func (f *driverFold) stored(env *events.Envelope, p any) {
	if len(f.ahead) > 0 {
		a := f.ahead[0]
		f.ahead = f.ahead[1:]
		if a.observe != nil {
			a.observe()
		}
	} else {
		f.apply(p)
	}
	if env != nil {
		f.version = env.Sequence
	}
}

// applyAhead applies a decided event before its append.
func (f *driverFold) applyAhead(e any, observe func()) {
	a := aheadEvent{observe: observe}
	if f.own {
		a.undo = f.state.ApplyReversibly(e)
	} else {
		f.state.Apply(e)
	}
	f.ahead = append(f.ahead, a)
}

// revert takes back, newest first, the events applied ahead that were
// not stored.
func (f *driverFold) revert() {
	if f.own {
		for i := len(f.ahead) - 1; i >= 0; i-- {
			f.state.Revert(f.ahead[i].undo)
		}
	}
	f.ahead = nil
}

// apply folds one event payload.
func (f *driverFold) apply(p any) { fold(f.state, f.issued, f.withdrawn, p) }

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
func (d *driver) catchUp(ctx context.Context) (err error) {
	f := events.Filter{Org: d.org, AggregateType: AggregateType, AggregateID: d.id}
	started := time.Now()
	defer func() {
		if err == nil {
			d.readAt = started
		}
	}()
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
