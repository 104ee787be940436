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
	return &driver{
		a: a, org: org, id: id, log: a.Log.With("org", org, "rollout", id),
		issued: map[string]bool{}, withdrawn: map[string]bool{}, own: map[string]bool{},
		inbox: make(chan message, 1024), external: make(chan string, 1024), execs: map[string]*execution{},
	}
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
// appends their events and pubs in one append. Planner commands stop at the
// first refusal (the next plan decides again); reports that are refused
// are stale (the step moved on) and dropped. A lost race re-reads the log
// and decides again.
func (d *driver) appendBatch(ctx context.Context, cmds []rollout.Command, pubs []message, stopAtRefusal bool) error {
	for attempt := 1; ; attempt++ {
		now := d.a.now()
		st := d.state.Clone()
		var drafts []events.Draft
		var payloads []any
		for _, c := range cmds {
			evs, err := rollout.Decide(st, c, now)
			if err != nil {
				d.log.Debug("command refused", "command", c.CommandType(), "err", err)
				if stopAtRefusal {
					break
				}
				continue
			}
			for _, e := range evs {
				st.Apply(e)
				drafts = append(drafts, events.Draft{Payload: e.(events.Payload)})
				payloads = append(payloads, e)
			}
			if len(drafts) >= maxBatch {
				break
			}
		}
		for _, p := range pubs {
			if d.published(p.publish) {
				continue
			}
			drafts = append(drafts, events.Draft{ID: p.draftID, Payload: p.publish})
			payloads = append(payloads, p.publish)
		}
		if len(drafts) == 0 {
			return nil
		}
		actx, span := d.span(ctx, "rollout append", attribute.Int("anvil.events", len(drafts)))
		envs, err := d.a.Store.Append(actx, ref(d.org, d.id), d.version, drafts...)
		span.End()
		var conflict *events.ConflictError
		if err != nil {
			if cerr := d.catchUp(ctx); cerr != nil {
				return errors.Join(err, cerr)
			}
			if errors.As(err, &conflict) && attempt < 8 {
				continue
			}
			return err
		}
		for i := range envs {
			d.own[envs[i].ID] = true
			d.a.Metrics.rolloutEvent(&d.state, payloads[i])
			d.apply(payloads[i])
			d.version = envs[i].Sequence
		}
		if len(envs) > 0 {
			d.a.Metrics.appended(len(envs))
		}
		return nil
	}
}

func (d *driver) published(p events.Payload) bool {
	switch e := p.(type) {
	case bootapi.RebootRequested:
		return d.issued[e.InstructionID]
	case bootapi.InstructionWithdrawn:
		return d.withdrawn[e.InstructionID]
	}
	return false
}

// apply folds one event payload into the driver's state.
func (d *driver) apply(p any) {
	switch e := p.(type) {
	case bootapi.RebootRequested:
		d.issued[e.InstructionID] = true
	case *bootapi.RebootRequested:
		d.issued[e.InstructionID] = true
	case bootapi.InstructionWithdrawn:
		d.withdrawn[e.InstructionID] = true
	case *bootapi.InstructionWithdrawn:
		d.withdrawn[e.InstructionID] = true
	default:
		d.state.Apply(p)
	}
}

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
