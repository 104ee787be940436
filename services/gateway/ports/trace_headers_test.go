package ports

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// TestTraceHeaders: every answer, whichever layer writes it (a route, the
// authentication, the catch-all, the size limit), names the gateway's
// server span in traceparent and its trace in X-Trace-Id; a request that
// sent a traceparent keeps the caller's trace ID.
func TestTraceHeaders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	srv := httptest.NewServer(NewHandler(Deps{BodyLimit: 16, Log: slog.New(slog.DiscardHandler)}))
	defer srv.Close()

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	format := regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$`)
	for _, c := range []struct {
		name, method, path, body, traceparent string
		status                                int
	}{
		{"a route", "GET", "/openapi.json", "", "", http.StatusOK},
		{"no token", "GET", "/api/v1/orgs/acme/machines", "", "", http.StatusUnauthorized},
		{"no route", "GET", "/nowhere", "", "", http.StatusNotFound},
		{"too large", "POST", "/api/v1/orgs", strings.Repeat("x", 17), "", http.StatusRequestEntityTooLarge},
		{"the caller's trace", "GET", "/openapi.json", "", "00-" + callerTrace + "-00f067aa0ba902b7-01", http.StatusOK},
		{"the caller's trace, refused", "GET", "/api/v1/orgs/acme/machines", "", "00-" + callerTrace + "-00f067aa0ba902b7-01", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.traceparent != "" {
				req.Header.Set("traceparent", c.traceparent)
			}
			before := len(rec.Ended())
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
			tp, id := res.Header.Get("traceparent"), res.Header.Get("X-Trace-Id")
			m := format.FindStringSubmatch(tp)
			if m == nil {
				t.Fatalf("traceparent %q is not a W3C traceparent", tp)
			}
			if id != m[1] {
				t.Errorf("X-Trace-Id %q, traceparent's trace %q", id, m[1])
			}
			if c.traceparent != "" && id != callerTrace {
				t.Errorf("trace %s, want the caller's %s", id, callerTrace)
			}
			if c.traceparent == "" && id == callerTrace {
				t.Error("a request without traceparent is in the earlier caller's trace")
			}
			// The headers name the gateway's own server span, not the caller's.
			// (svc.InstrumentHTTP ends it after the answer is written.)
			eventstest.Eventually(t, "the span in traceparent ends", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
				var names []string
				for _, s := range rec.Ended()[before:] {
					sc := s.SpanContext()
					if sc.TraceID().String() == m[1] && sc.SpanID().String() == m[2] {
						return s.SpanKind() == trace.SpanKindServer, s.Name() + " is a " + s.SpanKind().String() + " span"
					}
					names = append(names, s.Name())
				}
				return false, fmt.Sprintf("traceparent %s names none of the ended spans %v", tp, names)
			})
		})
	}
}
