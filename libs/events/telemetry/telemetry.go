// Package telemetry sets up tracing and logging the same way in every
// service: W3C trace context, an OTLP exporter when one is configured, and
// slog records that carry the trace and span IDs.
package telemetry

import (
	"context"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// SetupTracing installs the global tracer provider and propagator. Spans are
// exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-
// specific variable) is set, every one recorded unless OTEL_TRACES_SAMPLER
// says otherwise. Without an exporter they are still made, with their
// trace and span IDs, which logs carry and requests and events propagate,
// but not recorded unless the caller's traceparent asks for it (or
// OTEL_TRACES_SAMPLER is set): what nobody exports costs nothing per
// request. The returned function flushes and stops.
func SetupTracing(ctx context.Context, service string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	} else if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		// A caller that asked for its trace to be recorded still gets it
		// (and its sampled flag goes on downstream, to services that do
		// export); nothing else is recorded.
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// NewLogger returns a JSON (or text) slog logger at the given level that adds
// trace_id and span_id from the record's context.
func NewLogger(service, level, format string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	ho := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	if strings.EqualFold(format, "text") {
		h = slog.NewTextHandler(os.Stderr, ho)
	} else {
		h = slog.NewJSONHandler(os.Stderr, ho)
	}
	return slog.New(TraceHandler{h}).With("service", service)
}

// TraceHandler adds the current span's IDs to every record logged with a
// context, so that a log line leads to its trace.
type TraceHandler struct{ slog.Handler }

func (h TraceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h TraceHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return TraceHandler{h.Handler.WithAttrs(a)}
}
func (h TraceHandler) WithGroup(n string) slog.Handler { return TraceHandler{h.Handler.WithGroup(n)} }
