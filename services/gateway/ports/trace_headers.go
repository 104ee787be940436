package ports

import (
	"net/http"

	"go.opentelemetry.io/otel/trace"
)

// traceHeaders tells the caller which trace its request is in, so that a
// user can quote it and an operator find the logs (they carry trace_id)
// and spans: every answer carries the server span as a W3C `traceparent`
// and its trace ID as `X-Trace-Id`. A request that sent a traceparent is
// in the caller's trace (svc.InstrumentHTTP continues it), so the trace ID is the
// caller's. It runs inside svc.InstrumentHTTP, where the span exists, and
// sets the headers before anything can write the status line.
func traceHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			w.Header().Set("Traceparent", traceparent(sc))
			w.Header().Set("X-Trace-Id", sc.TraceID().String())
		}
		next.ServeHTTP(w, r)
	})
}

// traceparent formats a span context as a version-00 W3C traceparent.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}
