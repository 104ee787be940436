package anvilctl_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	gateway "github.com/anvil-fleet/anvil/services/gateway/service"
	regapp "github.com/anvil-fleet/anvil/services/registry/app"
	registry "github.com/anvil-fleet/anvil/services/registry/service"
	revisions "github.com/anvil-fleet/anvil/services/revisions/service"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// cannedRollouts answers the rollout service's subjects on the stack's
// NATS with canned rollouts whose logs the test grows.
//
// TODO: replace with the real rollout service once it lands (devstack
// already runs it; this responder would then compete with it).
type cannedRollouts struct {
	mu       sync.Mutex
	rollouts map[string]*rolloutapi.Rollout
	logs     map[string][]operation.Entry
	final    map[string]bool
	changed  chan struct{}
}

func startCannedRollouts(t *testing.T, nc *nats.Conn) *cannedRollouts {
	c := &cannedRollouts{rollouts: map[string]*rolloutapi.Rollout{}, logs: map[string][]operation.Entry{}, final: map[string]bool{}, changed: make(chan struct{})}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for _, id := range []string{"ro-1", "ro-f"} {
		c.rollouts[id] = &rolloutapi.Rollout{Org: "acme", View: operation.View{ID: id, Kind: operation.Kind, Pool: "workers", Revision: 2,
			Status: rollout.StatusRunning, Progress: operation.Progress{Done: 1, Total: 3, InProgress: 1, NotStarted: 1},
			Machines: []operation.Machine{{MachineReport: rollout.MachineReport{UUID: uuid, Hostname: "w1"}, Phase: "done"}}, StartedAt: t0, Log: []operation.Entry{}},
			UpdatedAt: t0, Version: 7}
		c.logs[id] = []operation.Entry{{At: t0, Outcome: operation.LogStarted, Message: "3 machines"},
			{At: t0.Add(time.Second), Node: "w1", Step: rollout.StepUncordon, Outcome: operation.LogSucceeded}}
	}
	srv := command.NewServer(nc, "canned-rollout", 32, nil)
	t.Cleanup(srv.Close)
	find := func(org, id string) (*rolloutapi.Rollout, error) {
		ro, ok := c.rollouts[id]
		if !ok || ro.Org != org {
			return nil, errs.NotFound("rollout %s does not exist", id)
		}
		return ro, nil
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(command.Handle(srv, rolloutapi.SubjectGet, func(_ context.Context, r rolloutapi.GetRequest) (rolloutapi.Rollout, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		ro, err := find(r.Org, r.ID)
		if err != nil {
			return rolloutapi.Rollout{}, err
		}
		return *ro, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectList, func(_ context.Context, r rolloutapi.ListRequest) (rolloutapi.RolloutList, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return rolloutapi.RolloutList{Items: []rolloutapi.Rollout{*c.rollouts["ro-1"], *c.rollouts["ro-f"]}}, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectOperationList, func(_ context.Context, r rolloutapi.ListRequest) (rolloutapi.OperationList, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		ro := c.rollouts["ro-1"]
		return rolloutapi.OperationList{Items: []rolloutapi.Operation{{Org: "acme", ID: ro.ID, Kind: operation.Kind, Pool: ro.Pool,
			Status: string(ro.Status), Progress: ro.Progress, StartedAt: ro.StartedAt, UpdatedAt: ro.UpdatedAt, Version: ro.Version}}}, nil
	}))
	control := func(subject string, from, to rollout.Status) {
		must(command.Handle(srv, subject, func(_ context.Context, r rolloutapi.ControlRequest) (rolloutapi.Rollout, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			ro, err := find(r.Org, r.ID)
			switch {
			case err != nil:
				return rolloutapi.Rollout{}, err
			case r.ExpectedVersion != 0 && r.ExpectedVersion != ro.Version:
				return rolloutapi.Rollout{}, errs.Precondition("rollout %s is at version %d", r.ID, ro.Version)
			case ro.Status != from:
				return rolloutapi.Rollout{}, errs.Conflict("rollout %s is %s", r.ID, ro.Status)
			}
			ro.Status = to
			ro.Version++
			return *ro, nil
		}))
	}
	control(rolloutapi.SubjectPause, rollout.StatusRunning, rollout.StatusPaused)
	control(rolloutapi.SubjectResume, rollout.StatusPaused, rollout.StatusRunning)
	control(rolloutapi.SubjectRetry, rollout.StatusFailed, rollout.StatusRunning)
	must(command.Handle(srv, rolloutapi.SubjectOperationLog, func(_ context.Context, r rolloutapi.LogRequest) (rolloutapi.LogPage, error) {
		deadline := time.After(min(r.Wait, 500*time.Millisecond))
		for {
			c.mu.Lock()
			ro, err := find(r.Org, r.ID)
			if err != nil {
				c.mu.Unlock()
				return rolloutapi.LogPage{}, err
			}
			log, final, changed, status := c.logs[r.ID], c.final[r.ID], c.changed, string(ro.Status)
			c.mu.Unlock()
			after := min(r.After, len(log))
			if len(log) > after || final || r.Wait == 0 {
				return rolloutapi.LogPage{Entries: append([]operation.Entry{}, log[after:]...), Next: len(log), Status: status, Final: final}, nil
			}
			select {
			case <-changed:
			case <-deadline:
				return rolloutapi.LogPage{Entries: []operation.Entry{}, Next: after, Status: status}, nil
			}
		}
	}))
	return c
}

// advance appends an entry and sets the progress; status, if set, ends
// the rollout.
func (c *cannedRollouts) advance(id string, e operation.Entry, done int, status rollout.Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ro := c.rollouts[id]
	c.logs[id] = append(c.logs[id], e)
	ro.Progress.Done, ro.Progress.InProgress = done, min(1, ro.Progress.Total-done)
	ro.Version++
	if status != "" {
		ro.Status, c.final[id] = status, true
		if status == rollout.StatusFailed {
			ro.Reason, ro.Progress.Failed = "drain of w3 timed out", 1
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// syncBuffer is a buffer that a watching command writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Rollouts through the CLI, against the real gateway over HTTP and a
// canned rollout responder on real NATS: the live watch of a rollout that
// succeeds, which the real rollout service cannot run without a cluster.
// TODO: replace with the real rollout service once it lands.
func TestCLIRollouts(t *testing.T) {
	s, nc := startWithoutRollout(t)
	// before the responder: the gateway's 503 comes through
	if _, _, err := s.run("get", "rollouts"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("without the rollout service: %v", err)
	}
	c := startCannedRollouts(t, nc)

	out := s.must("get", "rollouts")
	if !strings.Contains(out, "ro-1") || !strings.Contains(out, "1/3") || !strings.Contains(out, "running") {
		t.Fatalf("get rollouts: %s", out)
	}
	if out := s.must("get", "operations"); !strings.Contains(out, "ro-1") || !strings.Contains(out, "rollout") {
		t.Fatalf("get operations: %s", out)
	}
	out = s.must("rollout", "status", "ro-1")
	if !strings.Contains(out, "rollout ro-1: pool workers, revision 2") || !strings.Contains(out, "1/3 done, 1 in progress, 0 failed: running") || !strings.Contains(out, "w1") {
		t.Fatalf("rollout status: %s", out)
	}
	if out := s.must("rollout", "pause", "ro-1", "--reason", "lunch", "--if-match", "7"); !strings.Contains(out, "rollout/ro-1 paused (status paused)") {
		t.Fatalf("pause: %s", out)
	}
	if _, _, err := s.run("rollout", "resume", "ro-1", "--if-match", "7"); err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("stale resume: %v", err)
	}
	if _, _, err := s.run("rollout", "retry", "ro-1"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("retry a paused rollout: %v", err)
	}
	s.must("rollout", "resume", "ro-1")

	// watch: the log live, the progress redrawn, exit 0 on success
	var live syncBuffer
	done := make(chan error, 1)
	go func() {
		_, _, err := s.runCtx(t.Context(), &live, "rollout", "status", "ro-1", "--watch")
		done <- err
	}()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(live.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the watch never showed %q:\n%s", want, live.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("w1  uncordon  succeeded")
	now := time.Now().UTC()
	c.advance("ro-1", operation.Entry{At: now, Node: "w2", Step: rollout.StepUncordon, Outcome: operation.LogSucceeded}, 2, "")
	waitFor("w2  uncordon  succeeded")
	waitFor("2/3 done")
	c.advance("ro-1", operation.Entry{At: now, Outcome: operation.LogDone, Message: "3 of 3"}, 3, rollout.StatusSucceeded)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch: %v\n%s", err, live.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the watch did not end:\n%s", live.String())
	}
	if out := live.String(); !strings.Contains(out, "[##############################] 3/3 done, 0 in progress, 0 failed: succeeded") || !strings.Contains(out, "done: 3 of 3") {
		t.Fatalf("watch output:\n%s", out)
	}

	// a rollout that fails ends the watch with its reason
	c.advance("ro-f", operation.Entry{At: now, Node: "w3", Step: rollout.StepDrain, Outcome: operation.LogTimedOut}, 1, rollout.StatusFailed)
	out, _, err := s.run("rollout", "status", "ro-f", "--watch")
	if err == nil || !strings.Contains(err.Error(), "rollout ro-f failed: drain of w3 timed out") || !strings.Contains(out, "w3  drain  timed_out") {
		t.Fatalf("watch a failing rollout: %v\n%s", err, out)
	}
	if _, _, err := s.run("rollout", "status", "ro-9", "--watch"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("watch a missing rollout: %v", err)
	}
}

// startWithoutRollout runs the registry, revisions and gateway services
// (each through its own service package, as devstack does) on an embedded
// JetStream, but no rollout service, so that a canned responder can answer
// the rollout subjects alone. It returns the test's NATS connection.
// TODO: replace with devstack and the real rollout service once it can run
// a rollout to success without a Kubernetes cluster (the simulator).
func startWithoutRollout(t *testing.T) (*cliStack, *nats.Conn) {
	env := eventstest.Start(t, regapp.Registry())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	addr := freeAddr(t)
	sum := sha256.Sum256([]byte(adminToken))
	run := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := svc.Options{Conn: env.Conn, Logger: quiet}
	run("registry", func() error {
		return registry.Run(ctx, registry.Config{Config: svc.Config{Service: "registry"}}, opts)
	})
	run("revisions", func() error {
		return revisions.Run(ctx, revisions.Config{Config: svc.Config{Service: "revisions"},
			EncryptionKeys: "k1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))}, opts)
	})
	run("gateway", func() error {
		return gateway.Run(ctx, gateway.Config{Config: svc.Config{Service: "gateway"}, Listen: addr, AdminTokenHash: hex.EncodeToString(sum[:])}, opts)
	})
	s := &cliStack{t: t, base: "http://" + addr}
	s.setUp()
	return s, env.Conn
}
