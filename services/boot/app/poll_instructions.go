package app

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
)

// PollInstructions handles GET /agent/v1/machines/{uuid}/instructions?wait=N:
// it answers at once with the pending instructions, or holds the request
// until one is stored (on any replica: the wait watches the machine's KV
// entry) or wait runs out, and then answers with none (the port sends 204).
//
// An instruction is delivered until the agent accepts it or it is settled
// (at least once; the agent deduplicates by id). An instruction without a
// machine revision id is resolved first: the id the machine would boot for
// the instruction's pool revision with its current hostname and labels.
func (a *App) PollInstructions(ctx context.Context, ag Agent, wait time.Duration) ([]agentapi.Instruction, error) {
	agentRequests.WithLabelValues("instructions").Inc()
	wait = min(max(wait, 0), a.Settings.MaxPollWait)
	longPolls.Inc()
	defer longPolls.Dec()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	rec := ag.Record
	for {
		// Subscribe before reading, so that a change between the read and
		// the wait is not missed.
		changed, stop := a.Records.Wait(ag.Org, ag.UUID)
		out, err := a.deliver(ctx, ag, rec)
		if err != nil || len(out) > 0 {
			stop()
			return out, err
		}
		select {
		case <-changed:
			stop()
			if rec, err = a.Records.Get(ctx, ag.Org, ag.UUID); err != nil {
				return nil, asUnavailable(err, "the boot records")
			}
		case <-timer.C:
			stop()
			return nil, nil
		case <-ctx.Done():
			stop()
			return nil, nil
		}
	}
}

// deliver returns the deliverable instructions of rec, resolving their
// machine revisions and counting the delivery.
func (a *App) deliver(ctx context.Context, ag Agent, rec record.Record) ([]agentapi.Instruction, error) {
	now := a.Now()
	probe := rec.Clone()
	expired := probe.Expire(now)
	due := probe.Deliverable()
	if len(due) == 0 {
		if expired {
			_, err := a.update(ctx, rec, func(r *record.Record) (bool, error) { return r.Expire(now), nil })
			return nil, err
		}
		return nil, nil
	}
	resolved := map[string]string{}
	for _, in := range due {
		if in.MachineRevisionID != "" {
			continue
		}
		mrid, err := a.resolve(ctx, ag, in)
		if err != nil {
			return nil, err
		}
		resolved[in.ID] = mrid
	}
	ids := make([]string, len(due))
	for i, in := range due {
		ids[i] = in.ID
	}
	stored, err := a.Records.Update(ctx, ag.Org, ag.UUID, func(r *record.Record) (bool, error) {
		r.Expire(now)
		for id, mrid := range resolved {
			r.Resolve(id, mrid, now)
		}
		r.MarkDelivered(ids, now)
		return true, nil
	})
	if err != nil {
		return nil, asUnavailable(err, "the boot records")
	}
	var out []agentapi.Instruction
	for _, in := range stored.Deliverable() {
		if in.MachineRevisionID == "" {
			continue // arrived after the resolution above; the next poll has it
		}
		out = append(out, agentapi.Instruction{ID: in.ID, Kind: agentapi.Kind(in.Kind), Revision: in.MachineRevisionID, IssuedAt: in.IssuedAt})
		instructionEvents.WithLabelValues("delivered").Inc()
		if in.Deliveries == 1 {
			observeInstructionWait("delivered", in.IssuedAt, now)
		}
		traceDelivery(ctx, ag, in)
	}
	return out, nil
}

// resolve finds the machine revision an instruction without one means.
func (a *App) resolve(ctx context.Context, ag Agent, in record.Instruction) (string, error) {
	m, err := a.Registry.GetMachine(ctx, ag.Org, ag.UUID)
	if err != nil {
		if errs.Is(err, errs.KindNotFound) {
			return "", err
		}
		return "", asUnavailable(err, "the registry")
	}
	pool := in.Pool
	if pool == "" {
		pool = m.Pool
	}
	r, err := a.Renderer.Ignition(ctx, IgnitionRequest{Org: ag.Org, Pool: pool, Revision: in.Revision, Hostname: hostname(m), Labels: m.Labels})
	if err != nil {
		a.Log.WarnContext(ctx, "instruction's machine revision cannot be resolved", "org", ag.Org, "uuid", ag.UUID, "instruction", in.ID, "err", err)
		return "", asUnavailable(err, "resolving the instruction's machine revision")
	}
	return r.MachineRevisionID, nil
}

var tracer = otel.Tracer("github.com/anvil-fleet/anvil/services/boot/app")

// traceDelivery records the handing out of an instruction as a span of
// the trace that asked for the reboot, linked to the agent's request.
func traceDelivery(ctx context.Context, ag Agent, in record.Instruction) {
	if len(in.Trace) == 0 {
		return
	}
	parent := otel.GetTextMapPropagator().Extract(context.Background(), events.MapCarrier(in.Trace))
	_, span := tracer.Start(parent, "deliver instruction", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithAttributes(attribute.String("anvil.org", ag.Org), attribute.String("anvil.machine", ag.UUID),
			attribute.String("anvil.instruction_id", in.ID), attribute.String("anvil.instruction_kind", in.Kind)))
	span.End()
}
