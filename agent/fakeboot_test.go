package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

// fakeBoot is a test double of the boot service's agent API, implementing the
// contract in docs/agent.md closely enough to exercise the agent's loops. The
// real boot service is tested against the real agent end to end elsewhere.
type fakeBoot struct {
	t          *testing.T
	srv        *httptest.Server
	credential string
	uuid       string

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every recorded event
	heartbeats []api.Heartbeat
	reports    []api.Report
	acks       []ackRecord
	requests   map[string]int // per op, including failed ones
	userAgents map[string]bool

	// queue holds instructions (any JSON value) not yet delivered. With
	// redeliver set, an element with an id stays until it is acked terminally.
	queue     []any
	redeliver bool
	// rawBodies are served, one per poll, before the queue.
	rawBodies []string
	// rejectAuth answers this many requests with 401 before accepting.
	rejectAuth int
	// failures answers this many requests per op with the given status.
	failures map[string]int
	failWith int
	// refuseAccept answers "accepted" acks with 409.
	refuseAccept bool
	// arrived lists the ops of the requests answered, in arrival order.
	arrived []string
}

type ackRecord struct {
	ID  string
	Ack api.Ack
}

func newFakeBoot(t *testing.T) *fakeBoot {
	f := &fakeBoot{
		t:          t,
		credential: "cred-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-do-not-log",
		uuid:       testUUID,
		changed:    make(chan struct{}),
		requests:   map[string]int{},
		userAgents: map[string]bool{},
		failures:   map[string]int{},
		failWith:   http.StatusInternalServerError,
	}
	mux := http.NewServeMux()
	prefix := "/agent/v1/machines/{uuid}/"
	mux.HandleFunc("POST "+prefix+"heartbeat", f.guard("heartbeat", f.heartbeat))
	mux.HandleFunc("POST "+prefix+"report", f.guard("report", f.report))
	mux.HandleFunc("GET "+prefix+"instructions", f.guard("instructions", f.instructions))
	mux.HandleFunc("POST "+prefix+"instructions/{id}/ack", f.guard("ack", f.ack))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

const testUUID = "4c4c4544-0042-3510-8052-b4c04f4e3132"

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// guard applies the contract's common rules and the injected failures.
func (f *fakeBoot) guard(op string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests[op]++
		f.userAgents[r.UserAgent()] = true
		reject := f.rejectAuth > 0
		if reject {
			f.rejectAuth--
		}
		fail := f.failures[op] > 0
		if fail {
			f.failures[op]--
		}
		known := r.PathValue("uuid") == f.uuid
		f.arrived = append(f.arrived, op)
		f.notifyLocked()
		f.mu.Unlock()

		switch {
		case r.Header.Get("Authorization") != "Bearer "+f.credential || reject:
			problem(w, http.StatusUnauthorized, "agent credential revoked")
		case !known:
			problem(w, http.StatusNotFound, "unknown machine")
		case fail:
			if f.failWith == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "0")
			}
			problem(w, f.failWith, "injected failure")
		default:
			h(w, r)
		}
	}
}

func decodeBody[T any](w http.ResponseWriter, r *http.Request) (T, bool) {
	var v T
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return v, false
	}
	return v, true
}

func (f *fakeBoot) heartbeat(w http.ResponseWriter, r *http.Request) {
	hb, ok := decodeBody[api.Heartbeat](w, r)
	if !ok {
		return
	}
	f.record(func() { f.heartbeats = append(f.heartbeats, hb) })
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeBoot) report(w http.ResponseWriter, r *http.Request) {
	rep, ok := decodeBody[api.Report](w, r)
	if !ok {
		return
	}
	f.record(func() { f.reports = append(f.reports, rep) })
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeBoot) ack(w http.ResponseWriter, r *http.Request) {
	ack, ok := decodeBody[api.Ack](w, r)
	if !ok {
		return
	}
	switch ack.Status {
	case api.AckAccepted, api.AckDone, api.AckSkipped, api.AckFailed:
	default:
		problem(w, http.StatusBadRequest, "bad status")
		return
	}
	id := r.PathValue("id")
	f.mu.Lock()
	refuse := f.refuseAccept && ack.Status == api.AckAccepted
	f.mu.Unlock()
	if refuse {
		problem(w, http.StatusConflict, "instruction withdrawn")
		return
	}
	f.record(func() {
		f.acks = append(f.acks, ackRecord{id, ack})
		if ack.Status.Terminal() {
			f.queue = removeID(f.queue, id)
		}
	})
	w.WriteHeader(http.StatusNoContent)
}

// instructions answers at once when something is queued, else holds the
// poll briefly (a stand-in for the real wait) and answers 204.
func (f *fakeBoot) instructions(w http.ResponseWriter, r *http.Request) {
	if _, err := strconv.Atoi(r.URL.Query().Get("wait")); err != nil {
		problem(w, http.StatusBadRequest, "wait must be a number")
		return
	}
	deadline := time.After(20 * time.Millisecond)
	for {
		f.mu.Lock()
		if len(f.rawBodies) > 0 {
			body := f.rawBodies[0]
			f.rawBodies = f.rawBodies[1:]
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
			return
		}
		if len(f.queue) > 0 {
			items := append([]any(nil), f.queue...)
			if !f.redeliver {
				f.queue = nil
			}
			f.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"instructions": items})
			return
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			w.WriteHeader(http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (f *fakeBoot) record(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	f.notifyLocked()
}

func (f *fakeBoot) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeBoot) push(items ...any) {
	f.record(func() { f.queue = append(f.queue, items...) })
}

func (f *fakeBoot) pushRaw(bodies ...string) {
	f.record(func() { f.rawBodies = append(f.rawBodies, bodies...) })
}

func (f *fakeBoot) set(fn func(f *fakeBoot)) { f.record(func() { fn(f) }) }

func (f *fakeBoot) snapshot() (hbs []api.Heartbeat, reps []api.Report, acks []ackRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.Heartbeat(nil), f.heartbeats...), append([]api.Report(nil), f.reports...), append([]ackRecord(nil), f.acks...)
}

func (f *fakeBoot) acksFor(id string) []api.Ack {
	_, _, acks := f.snapshot()
	var out []api.Ack
	for _, a := range acks {
		if a.ID == id {
			out = append(out, a.Ack)
		}
	}
	return out
}

func (f *fakeBoot) requestCount(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// waitFor waits until cond holds. The deadline is generous on purpose: the
// machine is shared, and only a hang should fail a test.
func (f *fakeBoot) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		changed := f.changed
		f.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-time.After(50 * time.Millisecond): // conditions outside the server, e.g. the rebooter
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func removeID(items []any, id string) []any {
	var out []any
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m["id"] == id {
			continue
		}
		out = append(out, it)
	}
	return out
}

func instruction(id string, kind api.Kind, rev string) map[string]any {
	return map[string]any{"id": id, "kind": string(kind), "revision": rev, "issued_at": time.Now().UTC().Format(time.RFC3339)}
}

// fakeRebooter records reboots instead of doing them.
type fakeRebooter struct {
	mu      sync.Mutex
	reasons []string
	err     error
}

func (r *fakeRebooter) Reboot(_ context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
	return r.err
}

func (r *fakeRebooter) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// syncBuffer collects logs from the agent's goroutines.
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

// harness is one agent under test with its fakes.
type harness struct {
	f        *fakeBoot
	rebooter *fakeRebooter
	logs     *syncBuffer
	cfg      Config
	agent    *Agent
}

func newHarness(t *testing.T, f *fakeBoot, mutate ...func(*Config)) *harness {
	t.Helper()
	h := &harness{f: f, rebooter: &fakeRebooter{}, logs: &syncBuffer{}}
	h.cfg = Config{
		BootURL:           f.srv.URL,
		MachineUUID:       strings.ToUpper(testUUID), // the agent must lowercase it
		Credential:        f.credential,
		BootedRevision:    "rev-1",
		BootID:            "boot-1",
		Root:              "inventory/testdata/host",
		StateFile:         t.TempDir() + "/state.json",
		HeartbeatInterval: 10 * time.Millisecond,
		ReportInterval:    10 * time.Millisecond,
		PollWait:          time.Second,
		MinPollInterval:   2 * time.Millisecond,
		RetryInitial:      2 * time.Millisecond,
		RetryMax:          20 * time.Millisecond,
		RequestTimeout:    10 * time.Second,
		Rebooter:          h.rebooter,
		Journal: JournalFunc(func(context.Context, int) ([]string, error) {
			return []string{"2026-03-01T10:00:00+0000 host systemd[1]: Started anvil-agent.service."}, nil
		}),
		Logger:  slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version: "test",
	}
	for _, m := range mutate {
		m(&h.cfg)
	}
	t.Cleanup(func() {
		if strings.Contains(h.logs.String(), f.credential) {
			t.Errorf("the credential appears in the logs")
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", h.logs.String())
		}
	})
	return h
}

// start runs the agent until the returned stop is called (or the test ends).
func (h *harness) start(t *testing.T) (stop func()) {
	t.Helper()
	a, err := New(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func readState(t *testing.T, path string) persistedState {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st persistedState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	return st
}

func statuses(acks []api.Ack) string {
	var s []string
	for _, a := range acks {
		s = append(s, string(a.Status))
	}
	return fmt.Sprint(s)
}
