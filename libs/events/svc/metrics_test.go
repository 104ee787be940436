package svc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/buildinfo"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

// TestRuntimeMetrics: a started service's admin listener shows its build
// info and, read at scrape time, that its NATS connection and JetStream
// answer; once closed, its listener is gone and it reports no connection.
func TestRuntimeMetrics(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx := context.Background()
	rt, err := svc.Start(ctx, svc.Config{Service: "metricstest", StreamReplicas: 1, AdminAddr: addr},
		events.NewRegistry(), svc.Options{Conn: env.Connect(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var body string
	eventstest.Eventually(t, "the admin listener serves /metrics", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		body = scrape()
		return strings.Contains(body, "anvil_build_info"), body
	})
	for _, want := range []string{
		`anvil_build_info{git_commit="` + buildinfo.Get().GitCommit + `",go_version="go`,
		`service="metricstest",version="` + buildinfo.Get().Version + `"} 1`,
		`anvil_nats_connected{service="metricstest"} 1`,
		`anvil_jetstream_available{service="metricstest"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	rt.Close(ctx)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		resp.Body.Close()
		t.Error("the admin listener still answers after Close")
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "anvil_nats_connected" && l.GetValue() == "metricstest" {
					t.Error("a closed runtime still reports its connection")
				}
			}
		}
	}
}
