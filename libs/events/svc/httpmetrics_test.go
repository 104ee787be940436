package svc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestMetricsOnlyOnTheAdminMux: a public listener mounts /healthz and
// /readyz (Health.Mux) but never /metrics; the admin listener has all three.
func TestMetricsOnlyOnTheAdminMux(t *testing.T) {
	h := NewHealth()
	get := func(mux http.Handler, path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	public := h.Mux(nil)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 404} {
		if got := get(public, path); got != want {
			t.Errorf("public %s: %d, want %d", path, got, want)
		}
	}
	admin := h.AdminMux()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := get(admin, path); got != 200 {
			t.Errorf("admin %s: %d, want 200", path, got)
		}
	}
}

// TestInstrumentHTTPLabels: requests are labelled with the pattern the mux
// matched, never the path; unknown methods fold into "other"; the status
// is the one written (200 when none is), 500 for a panic, 499 for a 5xx
// whose client went away.
func TestInstrumentHTTPLabels(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/orgs/{org}/machines/{uuid}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/boot.ipxe", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the metrics writer: %v", err)
		}
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("GET /dependency", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // a dependency failed, or the client went away
	})
	h := InstrumentHTTP("test-labels", mux)
	serve := func(method, path string) {
		defer func() { _ = recover() }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	}
	serve(http.MethodGet, "/api/v1/orgs/acme/machines/4c4c4544-0042-3510-8052-b4c04f4e4e31")
	serve(http.MethodGet, "/api/v1/orgs/other/machines/4c4c4544-0042-3510-8052-b4c04f4e4e32")
	serve("BREW", "/boot.ipxe")
	serve(http.MethodGet, "/no/such/path/secret-token")
	serve(http.MethodGet, "/stream")
	serve(http.MethodGet, "/panic")
	serve(http.MethodGet, "/dependency")
	gone, cancel := context.WithCancel(context.Background())
	cancel() // the client went away before the answer
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(gone, http.MethodGet, "/dependency", nil))

	for labels, want := range map[[3]string]uint64{
		{"/api/v1/orgs/{org}/machines/{uuid}", "GET", "200"}: 2,
		{"/boot.ipxe", "other", "418"}:                       1,
		{"unmatched", "GET", "404"}:                          1,
		{"/stream", "GET", "200"}:                            1,
		{"/panic", "GET", "500"}:                             1,
		{"/dependency", "GET", "503"}:                        1,
		{"/dependency", "GET", "499"}:                        1,
	} {
		if got := histogramCount(t, "test-labels", labels); got != want {
			t.Errorf("%v: %d requests, want %d", labels, got, want)
		}
	}
	for _, s := range httpSeries(t) {
		for k, v := range s.labels {
			for _, leak := range []string{"acme", "secret-token", "4c4c4544"} {
				if strings.Contains(v, leak) {
					t.Errorf("label %s=%q holds %q, from a path", k, v, leak)
				}
			}
		}
	}
}

// histogramCount reads the requests observed with labels l (route,
// method, code) for service from the default registry.
func histogramCount(t *testing.T, service string, l [3]string) uint64 {
	t.Helper()
	var n uint64
	for _, s := range httpSeries(t) {
		if s.labels["service"] == service && s.labels["route"] == l[0] && s.labels["method"] == l[1] && s.labels["code"] == l[2] {
			n += s.count
		}
	}
	return n
}

type series struct {
	labels map[string]string
	count  uint64
}

// httpSeries lists the series of anvil_http_request_duration_seconds.
func httpSeries(t *testing.T) []series {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []series
	for _, mf := range mfs {
		if mf.GetName() != "anvil_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := series{labels: map[string]string{}, count: m.GetHistogram().GetSampleCount()}
			for _, lp := range m.GetLabel() {
				s.labels[lp.GetName()] = lp.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

func TestRouteLabel(t *testing.T) {
	for in, want := range map[string]string{
		"":                                      "unmatched",
		"/":                                     "unmatched",
		"GET /api/v1/orgs/{org}":                "/api/v1/orgs/{org}",
		"/boot.ipxe":                            "/boot.ipxe",
		"GET example.com/healthz":               "/healthz",
		"POST /agent/v1/machines/{uuid}/report": "/agent/v1/machines/{uuid}/report",
	} {
		if got := RouteLabel(in); got != want {
			t.Errorf("RouteLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInstrumentHTTPSpans: every request is served in a server span that
// continues the caller's trace, named after the route (never the path),
// with the method, route and status, an error for a 5xx; the handler
// runs inside it.
func TestInstrumentHTTPSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	var inHandler trace.SpanContext
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/orgs/{org}/machines/{uuid}", func(w http.ResponseWriter, r *http.Request) {
		inHandler = trace.SpanContextFromContext(r.Context())
	})
	mux.HandleFunc("GET /fails", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	h := InstrumentHTTP("test-spans", mux)

	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := httptest.NewRequest(http.MethodGet, "/api/v1/orgs/acme/machines/4c4c4544-0042-3510-8052-b4c04f4e4e31?token=secret", nil)
	req.Header.Set("traceparent", "00-"+caller+"-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/fails", nil))

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2", len(spans))
	}
	got := spans[0]
	if got.Name() != "GET /api/v1/orgs/{org}/machines/{uuid}" || got.SpanKind() != trace.SpanKindServer ||
		got.SpanContext().TraceID().String() != caller || got.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span %q kind %v trace %s parent %s; want the route's name, a server span in the caller's trace",
			got.Name(), got.SpanKind(), got.SpanContext().TraceID(), got.Parent().SpanID())
	}
	if inHandler.SpanID() != got.SpanContext().SpanID() {
		t.Errorf("the handler ran in span %s, want %s", inHandler.SpanID(), got.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range got.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	for k, want := range map[string]string{"http.request.method": "GET", "http.route": "/api/v1/orgs/{org}/machines/{uuid}", "http.response.status_code": "200"} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	for k, v := range attrs {
		if strings.Contains(v, "secret") || strings.Contains(v, "acme") {
			t.Errorf("attribute %s=%q holds part of the path or query", k, v)
		}
	}
	if s := spans[1]; s.Name() != "GET /fails" || s.Status().Code != codes.Error {
		t.Errorf("failed request: span %q status %v; want an error", s.Name(), s.Status())
	}
}
