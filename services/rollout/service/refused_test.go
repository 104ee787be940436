package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/poison"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	regservice "github.com/anvil-fleet/anvil/services/registry/service"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/ports"
	"github.com/anvil-fleet/anvil/services/rollout/service"
)

// TestApplyThatCannotStart: a pool.apply_requested whose rollout the
// rollout service refuses for good (here a strategy from a revisions
// service with other rules: a drain timeout under the 1s the rollout
// takes) is not lost in the poison queue. The rollout exists under the id
// the apply announced, failed with the reason; the pool's operations list
// shows it; it cannot be retried; and a second request under the same id
// changes nothing. Only the registry and the rollout services run: the
// event is appended as the revisions service would.
func TestApplyThatCannotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the registry and rollout services")
	}
	env := eventstest.Start(t, service.NewRegistry())
	logs := &eventstest.SyncBuffer{}
	ctx := events.WithActor(context.Background(), testActor)
	run := func(name string, fn func(context.Context) error, ready func()) {
		eventstest.RunService(t, name, fn, ready, eventstest.RunOptions{StartTimeout: 90 * time.Second, StopTimeout: 60 * time.Second, Logs: logs})
	}
	logger := func(name string) *slog.Logger {
		return slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("svc", name)
	}
	regReady := make(chan *regservice.Service, 1)
	run("registry", func(ctx context.Context) error {
		return regservice.Start(ctx, regservice.Config{Config: svc.Config{Service: "registry", StreamReplicas: 1}},
			svc.Options{Conn: env.Connect(t), Logger: logger("registry")}, regservice.Hooks{Ready: regReady})
	}, func() { <-regReady })
	rollReady := make(chan *service.Service, 1)
	run("rollout", func(ctx context.Context) error {
		return service.Start(ctx, service.Config{Config: svc.Config{Service: service.Name, StreamReplicas: 1}, Instance: "test", LeaseTTL: 3 * time.Second},
			svc.Options{Conn: env.Connect(t), Logger: logger("rollout")}, service.Hooks{Ready: rollReady})
	}, func() { <-rollReady })
	client := api.Client{NC: env.Connect(t)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.Tail(60))
		}
	})

	const org, poolName, id = "refuse", "web", "ro-0123456789abcdef0123"
	poolRef := events.AggregateRef{Org: org, Type: "pool", ID: poolName}
	apply := revapi.ApplyRequested{Pool: poolName, Cluster: "c1", Revision: 2, Hash: "sha256:00", RequestedBy: testActor,
		RequestedAt: time.Now().UTC(), RolloutID: id,
		Rollout: revapi.Rollout{MaxUnavailable: "1", DrainTimeout: "500ms"}}
	if _, err := env.Store.Append(ctx, poolRef, 0, events.Draft{Payload: apply}); err != nil {
		t.Fatal(err)
	}

	var r api.Rollout
	eventstest.Eventually(t, "the apply's rollout exists", time.Minute, 50*time.Millisecond, func() (bool, string) {
		var err error
		r, err = client.Get(ctx, api.GetRequest{Org: org, ID: id})
		return err == nil, errString(err)
	})
	if r.Status != api.StatusFailed || !r.Refused || !strings.Contains(r.Reason, "cannot start") ||
		!strings.Contains(r.Reason, "strategy.drain_timeout") || r.Pool != poolName || r.Revision != 2 ||
		r.Cluster != "c1" || r.RequestedBy != testActor || r.Progress.Total != 0 || len(r.Conditions) != 0 {
		t.Fatalf("the refused rollout: %+v", r)
	}
	page, err := client.Log(ctx, api.LogRequest{Org: org, ID: id})
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Outcome != operation.LogRefused || !page.Final ||
		!strings.Contains(page.Entries[0].Message, r.Reason) {
		t.Fatalf("log %+v: %v", page, err)
	}

	// The pool's operations show it, failed with the reason; it holds
	// nothing, so it is not among the active rollouts.
	ops, err := client.ListOperations(ctx, api.ListRequest{Org: org, Pool: poolName})
	if err != nil || len(ops.Items) != 1 || ops.Items[0].ID != id || ops.Items[0].Status != "failed" || ops.Items[0].Reason != r.Reason {
		t.Fatalf("operations of the pool: %+v %v", ops, err)
	}
	ops, err = client.ListOperations(ctx, api.ListRequest{Org: org, Pool: poolName, Kind: api.KindRollout, Status: "failed"})
	if err != nil || len(ops.Items) != 1 || ops.Items[0].ID != id {
		t.Fatalf("failed rollouts of the pool: %+v %v", ops, err)
	}
	active, err := client.List(ctx, api.ListRequest{Org: org, Pool: poolName, Status: "active"})
	if err != nil || len(active.Items) != 0 {
		t.Fatalf("active rollouts: %+v %v", active, err)
	}

	// Nothing can change it.
	_, err = client.Retry(ctx, api.ControlRequest{Org: org, ID: id})
	if errs.KindOf(err) != errs.KindConflict || !strings.Contains(err.Error(), "never started") {
		t.Fatalf("retry of a refused rollout: %v", err)
	}

	// A second request under the same id (a redelivery, a retried call)
	// finds it: the handler takes it, and the rollout stays as it is, even
	// though this one could start.
	apply.Rollout.DrainTimeout = ""
	envs, err := env.Store.Append(ctx, poolRef, 1, events.Draft{Payload: apply})
	if err != nil {
		t.Fatal(err)
	}
	seq := envs[0].Sequence
	eventstest.Eventually(t, "the start handler took the second request", time.Minute, 50*time.Millisecond, func() (bool, string) {
		c, err := env.JS.Consumer(ctx, events.StreamName, "handler-"+ports.StartHandler)
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0,
			fmt.Sprintf("ack floor %d of %d, %d pending", info.AckFloor.Stream, seq, info.NumAckPending)
	})
	got, err := env.Store.Load(ctx, events.AggregateRef{Org: org, Type: "rollout", ID: id})
	if err != nil || len(got) != 1 || got[0].Type != "rollout.start_refused" {
		t.Fatalf("the rollout's events: %d %v", len(got), err)
	}
	again, err := client.Get(ctx, api.GetRequest{Org: org, ID: id})
	if err != nil || again.Reason != r.Reason || again.Version != r.Version {
		t.Fatalf("after the second request: %+v %v", again, err)
	}
	poisoned, err := poison.List(ctx, env.JS, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range poisoned {
		if p.Subject == poolRef.Subject() {
			t.Errorf("a request went to the poison queue: %s: %s", p.Consumer, p.Reason)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
