package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
)

// fakeRollout answers the rollout service's NATS subjects
// (services/rollout/api) with canned data and counts the log polls, for
// what the real rollout service cannot show: that the gateway stops
// polling when a stream's client goes away. Everything else is tested
// against the real rollout service (TestRolloutsWithFleet).
type fakeRollout struct {
	mu       sync.Mutex
	rollouts map[string]*rolloutapi.Rollout
	logs     map[string][]rolloutapi.Entry
	final    map[string]bool
	changed  chan struct{} // closed and replaced whenever a log grows
	seen     map[string][]any
	maxWait  time.Duration
	logCalls int
}

func newFakeRollout(t testing.TB, nc *nats.Conn) *fakeRollout {
	t.Helper()
	f := &fakeRollout{rollouts: map[string]*rolloutapi.Rollout{}, logs: map[string][]rolloutapi.Entry{}, final: map[string]bool{},
		changed: make(chan struct{}), seen: map[string][]any{}, maxWait: 300 * time.Millisecond}
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	f.rollouts["ro-1"] = &rolloutapi.Rollout{Org: "acme", View: rolloutapi.View{ID: "ro-1", Kind: rolloutapi.KindRollout, Pool: "workers", Revision: 2,
		Status: rolloutapi.StatusRunning, Progress: rolloutapi.Progress{Done: 1, Total: 3, InProgress: 1, NotStarted: 1},
		Machines: []rolloutapi.Machine{}, StartedAt: start, Log: []rolloutapi.Entry{}}, Cluster: "prod", UpdatedAt: start, Version: 40}
	f.logs["ro-1"] = []rolloutapi.Entry{
		{At: start, Outcome: operation.LogStarted, Message: "3 machines"},
		{At: start.Add(time.Second), Machine: uuidN(1), Node: "w1", Step: "cordon", Outcome: operation.LogBegun},
	}
	srv := command.NewServer(nc, "fake-rollout", 64, nil)
	t.Cleanup(srv.Close)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	record := func(subject string, req any) {
		f.mu.Lock()
		f.seen[subject] = append(f.seen[subject], req)
		f.mu.Unlock()
	}
	must(command.Handle(srv, rolloutapi.SubjectStart, func(_ context.Context, r rolloutapi.StartRequest) (rolloutapi.Rollout, error) {
		record(rolloutapi.SubjectStart, r)
		if r.Pool == "missing" {
			return rolloutapi.Rollout{}, errs.NotFound("pool %q does not exist", r.Pool)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		ro := &rolloutapi.Rollout{Org: r.Org, View: rolloutapi.View{ID: "ro-2", Kind: rolloutapi.KindRollout, Pool: r.Pool, Revision: uint64(r.Revision),
			After: r.After, Status: rolloutapi.StatusPending, Machines: []rolloutapi.Machine{}, Log: []rolloutapi.Entry{}, StartedAt: start},
			RequestedBy: r.RequestedBy, UpdatedAt: start, Version: 41}
		f.rollouts[ro.ID] = ro
		return *ro, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectGet, func(_ context.Context, r rolloutapi.GetRequest) (rolloutapi.Rollout, error) {
		record(rolloutapi.SubjectGet, r)
		f.mu.Lock()
		defer f.mu.Unlock()
		ro, ok := f.rollouts[r.ID]
		if !ok || ro.Org != r.Org {
			return rolloutapi.Rollout{}, errs.NotFound("rollout %s does not exist", r.ID)
		}
		out := *ro
		if r.At != "" { // as it was: still pending
			out.Status, out.Version = rolloutapi.StatusPending, 1
		}
		return out, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectList, func(_ context.Context, r rolloutapi.ListRequest) (rolloutapi.RolloutList, error) {
		record(rolloutapi.SubjectList, r)
		f.mu.Lock()
		defer f.mu.Unlock()
		out := rolloutapi.RolloutList{Items: []rolloutapi.Rollout{}}
		for _, ro := range f.rollouts {
			if ro.Org == r.Org && (r.Pool == "" || r.Pool == ro.Pool) {
				out.Items = append(out.Items, *ro)
			}
		}
		return out, nil
	}))
	control := func(subject string, from, to rolloutapi.Status) {
		must(command.Handle(srv, subject, func(_ context.Context, r rolloutapi.ControlRequest) (rolloutapi.Rollout, error) {
			record(subject, r)
			f.mu.Lock()
			defer f.mu.Unlock()
			ro, ok := f.rollouts[r.ID]
			switch {
			case !ok || ro.Org != r.Org:
				return rolloutapi.Rollout{}, errs.NotFound("rollout %s does not exist", r.ID)
			case r.ExpectedVersion != 0 && r.ExpectedVersion != ro.Version:
				return rolloutapi.Rollout{}, errs.Precondition("rollout %s is at version %d, not %d", r.ID, ro.Version, r.ExpectedVersion)
			case ro.Status != from:
				return rolloutapi.Rollout{}, errs.Conflict("rollout %s is %s", r.ID, ro.Status)
			}
			ro.Status = to
			ro.Version++
			return *ro, nil
		}))
	}
	control(rolloutapi.SubjectPause, rolloutapi.StatusRunning, rolloutapi.StatusPaused)
	control(rolloutapi.SubjectResume, rolloutapi.StatusPaused, rolloutapi.StatusRunning)
	control(rolloutapi.SubjectAbort, rolloutapi.StatusRunning, rolloutapi.StatusAborted)
	control(rolloutapi.SubjectRetry, rolloutapi.StatusFailed, rolloutapi.StatusRunning)
	opOf := func(ro *rolloutapi.Rollout) rolloutapi.Operation {
		return rolloutapi.Operation{Org: ro.Org, ID: ro.ID, Kind: rolloutapi.KindRollout, Pool: ro.Pool, Status: string(ro.Status), Progress: ro.Progress,
			StartedAt: ro.StartedAt, UpdatedAt: ro.UpdatedAt, Version: ro.Version, LogLength: len(f.logs[ro.ID])}
	}
	must(command.Handle(srv, rolloutapi.SubjectOperationGet, func(_ context.Context, r rolloutapi.GetRequest) (rolloutapi.Operation, error) {
		record(rolloutapi.SubjectOperationGet, r)
		f.mu.Lock()
		defer f.mu.Unlock()
		ro, ok := f.rollouts[r.ID]
		if !ok || ro.Org != r.Org {
			return rolloutapi.Operation{}, errs.NotFound("operation %s does not exist", r.ID)
		}
		op := opOf(ro)
		op.Rollout = ro
		return op, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectOperationList, func(_ context.Context, r rolloutapi.ListRequest) (rolloutapi.OperationList, error) {
		record(rolloutapi.SubjectOperationList, r)
		f.mu.Lock()
		defer f.mu.Unlock()
		out := rolloutapi.OperationList{Items: []rolloutapi.Operation{}}
		for _, ro := range f.rollouts {
			if ro.Org == r.Org && (r.Kind == "" || r.Kind == rolloutapi.KindRollout) {
				out.Items = append(out.Items, opOf(ro))
			}
		}
		return out, nil
	}))
	must(command.Handle(srv, rolloutapi.SubjectOperationLog, func(ctx context.Context, r rolloutapi.LogRequest) (rolloutapi.LogPage, error) {
		record(rolloutapi.SubjectOperationLog, r)
		deadline := time.After(min(r.Wait, f.maxWait))
		for {
			f.mu.Lock()
			f.logCalls++
			ro, ok := f.rollouts[r.ID]
			if !ok || ro.Org != r.Org {
				f.mu.Unlock()
				return rolloutapi.LogPage{}, errs.NotFound("operation %s does not exist", r.ID)
			}
			log, final, changed := f.logs[r.ID], f.final[r.ID], f.changed
			f.mu.Unlock()
			after := min(r.After, len(log))
			entries := log[after:]
			if r.Limit > 0 && len(entries) > r.Limit {
				entries = entries[:r.Limit]
			}
			if len(entries) > 0 || final || r.Wait == 0 {
				return rolloutapi.LogPage{Entries: append([]rolloutapi.Entry{}, entries...), Next: after + len(entries),
					Status: string(ro.Status), Final: final && after+len(entries) == len(log)}, nil
			}
			select {
			case <-changed:
			case <-deadline:
				return rolloutapi.LogPage{Entries: []rolloutapi.Entry{}, Next: after, Status: string(ro.Status)}, nil
			}
		}
	}))
	return f
}

// appendLog adds an entry to a rollout's log; final ends it.
func (f *fakeRollout) appendLog(id string, e rolloutapi.Entry, final bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[id] = append(f.logs[id], e)
	if final {
		f.final[id] = true
		f.rollouts[id].Status = rolloutapi.StatusSucceeded
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeRollout) logPolls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logCalls
}
