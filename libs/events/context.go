package events

import "context"

type ctxKey int

const (
	actorKey ctxKey = iota
	correlationKey
	causationKey
)

// WithActor records who or what causes the events appended under ctx: a
// token ("token:<id> (<name>)"), a service ("service:rollout") or a machine.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey, actor)
}

// Actor returns the actor recorded in ctx, or "".
func Actor(ctx context.Context) string {
	s, _ := ctx.Value(actorKey).(string)
	return s
}

// WithCorrelation sets the correlation ID shared by everything one user
// request causes.
func WithCorrelation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey, id)
}

// Correlation returns the correlation ID in ctx, or "".
func Correlation(ctx context.Context) string {
	s, _ := ctx.Value(correlationKey).(string)
	return s
}

// WithCausation sets the ID of the event or command that causes the events
// appended under ctx.
func WithCausation(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, causationKey, id)
}

// Causation returns the causation ID in ctx, or "".
func Causation(ctx context.Context) string {
	s, _ := ctx.Value(causationKey).(string)
	return s
}

// FromEnvelope returns ctx carrying env's actor and correlation, with env as
// the cause, so that a handler's own appends continue the chain.
func FromEnvelope(ctx context.Context, env *Envelope) context.Context {
	if env.Actor != "" && Actor(ctx) == "" {
		ctx = WithActor(ctx, env.Actor)
	}
	if env.CorrelationID != "" {
		ctx = WithCorrelation(ctx, env.CorrelationID)
	}
	return WithCausation(ctx, env.ID)
}
