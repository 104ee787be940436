package command_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// observations is the sample count of histogram name for subject and
// outcome in the default registry.
func observations(t *testing.T, name, subject, outcome string) uint64 {
	t.Helper()
	return series(t, name, subject, outcome).GetHistogram().GetSampleCount()
}

// TestDurationsByOutcome: the server observes how long it handled each
// command, the caller how long it waited, both by subject and outcome (the
// error kind of a refusal, unavailable when nobody answers).
func TestDurationsByOutcome(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	srv := command.NewServer(env.Conn, "metrics", 4, nil)
	t.Cleanup(srv.Close)
	const subject = "cmd.test.metrics"
	err := command.Handle(srv, subject, func(ctx context.Context, r assignReq) (assignResp, error) {
		if r.Machine == "missing" {
			return assignResp{}, errs.NotFound("no machine %q", r.Machine)
		}
		return assignResp{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The metrics are the process's: -count N runs this test N times.
	type metric struct{ name, subject, outcome string }
	before := map[metric]uint64{}
	for _, name := range []string{"anvil_command_request_duration_seconds", "anvil_command_handle_duration_seconds"} {
		for _, sub := range []string{subject, "cmd.test.nobody"} {
			for _, o := range []string{"ok", "not_found", "unavailable"} {
				before[metric{name, sub, o}] = observations(t, name, sub, o)
			}
		}
	}
	for _, m := range []string{"m1", "m2", "missing"} {
		_, _ = command.Call[assignReq, assignResp](ctx, env.Conn, subject, assignReq{Machine: m, Pool: "p"})
	}
	if _, err := command.Call[assignReq, assignResp](ctx, env.Conn, "cmd.test.nobody", assignReq{}); !errs.Is(err, errs.KindUnavailable) {
		t.Fatalf("a subject nobody serves: %v", err)
	}
	for _, c := range []struct {
		name, subject, outcome string
		want                   uint64
	}{
		{"anvil_command_request_duration_seconds", subject, "ok", 2},
		{"anvil_command_request_duration_seconds", subject, "not_found", 1},
		{"anvil_command_request_duration_seconds", "cmd.test.nobody", "unavailable", 1},
		{"anvil_command_handle_duration_seconds", subject, "ok", 2},
		{"anvil_command_handle_duration_seconds", subject, "not_found", 1},
	} {
		// The server observes after it replied.
		eventstest.Eventually(t, c.name+" "+c.outcome, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
			n := observations(t, c.name, c.subject, c.outcome) - before[metric{c.name, c.subject, c.outcome}]
			return n == c.want, fmt.Sprintf("%d new observations, want %d", n, c.want)
		})
	}
}
