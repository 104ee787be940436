package svc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

// TestReadiness: a service is not ready until it says it has started, and
// one that depends on another is ready only while a replica of that one
// is; /readyz says which dependency holds it back and why.
func TestReadiness(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(name string, admin bool) (*svc.Runtime, string) {
		var addr string
		if admin {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr = ln.Addr().String()
			ln.Close()
		}
		rt, err := svc.Start(context.Background(), svc.Config{Service: name, StreamReplicas: 1, AdminAddr: addr},
			events.NewRegistry(), svc.Options{Conn: env.Connect(t), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close(context.Background()) })
		return rt, addr
	}
	readyz := func(addr string) (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitReadyz := func(addr string, code int, says string) {
		t.Helper()
		eventstest.Eventually(t, "/readyz answers "+says, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
			got, body := readyz(addr)
			return got == code && strings.Contains(body, says), body
		})
	}

	caller, addr := start("caller", true)
	waitReadyz(addr, http.StatusServiceUnavailable, "started: the service is still starting")
	caller.DependsOn("callee")
	caller.Started()
	waitReadyz(addr, http.StatusServiceUnavailable, "service callee: no replica of callee is running")

	// A replica that serves its readiness but has not finished starting.
	starting, _ := start("callee", false)
	if err := starting.ServeReadiness(); err != nil {
		t.Fatal(err)
	}
	waitReadyz(addr, http.StatusServiceUnavailable, "callee is not ready (started: the service is still starting)")

	// A second replica that has started and has a failing check of its own.
	second, _ := start("callee", false)
	if err := second.ServeReadiness(); err != nil {
		t.Fatal(err)
	}
	failing := errors.New("catching up with the event log")
	second.Health.Add("projection things", func(context.Context) error { return failing })
	second.Started()
	waitReadyz(addr, http.StatusServiceUnavailable, "projection things: catching up with the event log")

	// Once one replica is ready, the caller is, though the other is not:
	// a ready replica answers first.
	second.Health.Add("projection things", func(context.Context) error { return nil })
	waitReadyz(addr, http.StatusOK, "ready")
}
