package svc

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// HTTPBuckets are the request duration buckets, in seconds: from a cached
// answer to a long poll (the agent's 30 s, an operation log's wait).
var HTTPBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

var httpDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "anvil_http_request_duration_seconds",
	Help:    "HTTP requests served on a public listener, by service, route pattern (never the raw path), method and status code.",
	Buckets: HTTPBuckets,
}, []string{"service", "route", "method", "code"})

// StatusClientClosedRequest is the code (nginx's) a request is counted
// and logged with when it failed because its client went away: the
// caller cancelled it (a machine rebooting mid-report, a CLI interrupted),
// the answer reaches nobody, and no dependency failed.
const StatusClientClosedRequest = 499

// ClientClosed reports whether a request answered with status failed
// because its client went away: a 5xx written after the request's
// context ended (the server cancels it when the connection closes; the
// failed dependency call was cancelled with it).
func ClientClosed(r *http.Request, status int) bool {
	return status >= 500 && r.Context().Err() != nil
}

// InstrumentHTTP serves every request next serves in a server span and
// observes it in anvil_http_request_duration_seconds. The span continues
// the caller's trace (W3C traceparent, through the global propagator) and
// is named, as the metric's route label is, after the pattern the mux
// matched (never the raw path); it records the method, the route and the
// status, an error for a 5xx or a panic (a 5xx whose client went away is
// counted as StatusClientClosedRequest, not an error). next must be (or end in, with
// nothing between that copies the request) the http.ServeMux that routes
// it: the route is r.Pattern, without its method, "unmatched" when none
// matched, so that neither a span name nor a label holds a path with an
// organization, a UUID or a token in it.
//
// It is otelhttp's server handler cut down to what anvil reads, which
// cost a quarter of a boot script's time (its per-request attributes,
// body wrappers and metrics).
func InstrumentHTTP(service string, next http.Handler) http.Handler {
	tracer := otel.Tracer("github.com/anvil-fleet/anvil/libs/events/svc")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, service, serverSpan...)
		r = r.WithContext(ctx) // the mux sets the pattern on this copy
		mw := &metricsWriter{ResponseWriter: w}
		defer func() {
			code := mw.status
			p := recover()
			if p != nil {
				code = http.StatusInternalServerError
			}
			if code == 0 {
				code = http.StatusOK
			}
			if p == nil && ClientClosed(r, code) {
				code = StatusClientClosedRequest
			}
			route, method := RouteLabel(r.Pattern), MethodLabel(r.Method)
			observers.of(service, route, method, code).Observe(time.Since(start).Seconds())
			if span.IsRecording() {
				span.SetName(method + " " + route)
				span.SetAttributes(semconv.HTTPRequestMethodKey.String(method), semconv.HTTPRoute(route),
					semconv.HTTPResponseStatusCode(code))
				if code >= 500 && code != StatusClientClosedRequest {
					span.SetStatus(codes.Error, http.StatusText(code))
				}
			}
			span.End()
			if p != nil {
				panic(p)
			}
		}()
		next.ServeHTTP(mw, r)
	})
}

// observerKey names one series of anvil_http_request_duration_seconds.
type observerKey struct {
	service, route, method string
	code                   int
}

// observerCache holds each series' observer once looked up: the labels
// are bounded (patterns, folded methods, status codes), and looking a
// series up by its label values hashes them and formats the code on
// every request, a tenth of a cached boot script's cost.
type observerCache struct{ m sync.Map } // observerKey -> prometheus.Observer

var observers observerCache

func (c *observerCache) of(service, route, method string, code int) prometheus.Observer {
	k := observerKey{service, route, method, code}
	if o, ok := c.m.Load(k); ok {
		return o.(prometheus.Observer)
	}
	o := httpDuration.WithLabelValues(service, route, method, strconv.Itoa(code))
	c.m.Store(k, o)
	return o
}

// serverSpan is the option of every request's span, made once.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// RouteLabel is a mux pattern as a label: without its method and host,
// "unmatched" for none (or the catch-all "/", which only answers 404 and
// 405).
func RouteLabel(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " ")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:] // a host-specific pattern
	}
	if pattern == "" || pattern == "/" {
		return "unmatched"
	}
	return pattern
}

// MethodLabel keeps the standard methods and folds anything else into
// "other", so that a client cannot make up label values.
func MethodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// metricsWriter records the status of an answer. It keeps what the
// writer underneath can do: flushes and deadlines through
// http.ResponseController (Unwrap), and sendfile (ReadFrom).
type metricsWriter struct {
	http.ResponseWriter
	status int
}

func (w *metricsWriter) WriteHeader(status int) {
	if w.status == 0 && status >= 200 { // 1xx are interim answers
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *metricsWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *metricsWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w.ResponseWriter, r)
}

// Flush lets a handler that asserts http.Flusher stream through it.
func (w *metricsWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls: the error of
// the flush underneath, which Flush cannot return (a client gone).
func (w *metricsWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *metricsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
