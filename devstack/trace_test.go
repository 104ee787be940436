package devstack

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/telemetry"
)

// TestLogsCarryTraceIDs: given a logger that knows nothing of traces (as a
// caller of Start may pass), a line the stack logs while serving a request
// carries that request's trace_id and span_id; and the gateway answers
// with the trace it continued.
func TestLogsCarryTraceIDs(t *testing.T) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	shutdown, err := telemetry.SetupTracing(context.Background(), "devstack-test") // as anvil-dev does
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	logs := &eventstest.SyncBuffer{}
	gw, bootAddr := freeAddr(t), freeAddr(t)
	st, err := Start(context.Background(), Config{DataDir: t.TempDir(), GatewayAddr: gw, BootAddr: bootAddr,
		AdminToken: "anvil_admin_devstack_test", PublicURL: "http://10.11.12.13:8081",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	// The services are ready; the gateway's listener may come a moment later.
	eventstest.Eventually(t, "the gateway answers /readyz", time.Minute, 20*time.Millisecond, func() (bool, string) {
		res, err := http.Get("http://" + gw + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	get := func(url string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	// The boot service logs every request it served, in the request's span.
	if res := get("http://"+bootAddr+"/boot.ipxe", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("boot.ipxe: %s", res.Status)
	}
	line := regexp.MustCompile(`msg="request served".* path=/boot\.ipxe .*trace_id=` + callerTrace + ` span_id=[0-9a-f]{16}\n`)
	eventstest.Eventually(t, "the boot service's request line carries the trace", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		all := logs.String()
		var served []string
		for _, l := range strings.Split(all, "\n") {
			if strings.Contains(l, "request served") {
				served = append(served, l)
			}
		}
		return line.MatchString(all), "request lines: " + strings.Join(served, "\n")
	})
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Count(l, "trace_id=") > 1 {
			t.Errorf("trace IDs twice: %s", l)
		}
	}

	res := get("http://"+gw+"/api/v1/orgs/acme/machines", map[string]string{"Authorization": "Bearer anvil_admin_devstack_test"})
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Trace-Id") != callerTrace ||
		!strings.HasPrefix(res.Header.Get("traceparent"), "00-"+callerTrace+"-") {
		t.Errorf("gateway: %s, X-Trace-Id %q, traceparent %q; want the caller's trace %s", res.Status,
			res.Header.Get("X-Trace-Id"), res.Header.Get("traceparent"), callerTrace)
	}
}

// TestTraceAwareOnce: a logger that already adds trace IDs (the one
// anvil-dev builds) is not wrapped again; one that does not is.
func TestTraceAwareOnce(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	for _, c := range []struct {
		name string
		h    func(io.Writer) slog.Handler
	}{
		{"plain", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }},
		{"trace-aware", func(w io.Writer) slog.Handler { return telemetry.TraceHandler{Handler: slog.NewTextHandler(w, nil)} }},
	} {
		var b strings.Builder
		traceAware(slog.New(c.h(&b))).With("service", "gateway").InfoContext(ctx, "in a span")
		traceAware(slog.New(c.h(&b))).Info("in no span")
		want := "msg=\"in a span\" service=gateway trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7\n"
		lines := strings.SplitAfter(b.String(), "\n")
		if !strings.HasSuffix(lines[0], want) || strings.Contains(lines[1], "trace_id") {
			t.Errorf("%s: %q, want the first line to end %q and the second to have no trace_id", c.name, b.String(), want)
		}
	}
}
