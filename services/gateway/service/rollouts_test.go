package service_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
)

// The gateway's own behaviour on the rollout routes, with no rollout
// service answering: validation names the fields, access control holds,
// and a valid request is a 503 problem.
func TestRolloutRoutesWithoutService(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	for _, c := range []struct {
		method, path string
		body         any
		hdr          map[string]string
		fields       []string
	}{
		{"POST", "/rollouts", map[string]any{}, nil, []string{"pool"}},
		{"POST", "/rollouts", map[string]any{"pool": "Bad Pool", "revision": -1, "machine": "nope", "after": "/x"}, nil, []string{"pool", "revision", "machine", "after"}},
		{"POST", "/rollouts", map[string]any{"pool": "workers", "colour": "red"}, nil, []string{"colour"}},
		{"POST", "/rollouts", map[string]any{"pool": "workers", "revision": "two"}, nil, []string{"revision"}},
		{"GET", "/rollouts?status=sideways&limit=0&pool=A", nil, nil, []string{"status", "limit", "pool"}},
		{"GET", "/rollouts/ro-1?at=yesterday", nil, nil, []string{"at"}},
		{"GET", "/rollouts/ro.1", nil, nil, []string{"id"}},
		{"POST", "/rollouts/ro-1/pause", nil, map[string]string{"If-Match": "soon"}, []string{"If-Match"}},
		{"POST", "/rollouts/ro-1/abort", map[string]any{"why": "x"}, nil, []string{"why"}},
		{"GET", "/operations?kind=party&status=Bad", nil, nil, []string{"kind", "status"}},
		{"GET", "/operations/op-1?at=0", nil, nil, []string{"at"}},
		{"GET", "/operations/op-1/log?after=-1&limit=5000", nil, nil, []string{"after", "limit"}},
		{"GET", "/operations/op-1/log", nil, map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "x"}, []string{"Last-Event-ID"}},
	} {
		r := s.do(c.method, base+c.path, tn.operator, c.body, c.hdr, nil)
		p := r.problem()
		var got []string
		for _, f := range p.Errors {
			got = append(got, f.Field)
		}
		slices.Sort(got)
		slices.Sort(c.fields)
		if r.status != 422 || r.header.Get("Content-Type") != "application/problem+json" || !slices.Equal(got, c.fields) {
			t.Errorf("%s %s: %d %s; want 422 naming %v", c.method, c.path, r.status, r.body, c.fields)
		}
	}
	// valid requests reach for the rollout service, which does not answer
	for _, c := range []struct{ method, path string }{
		{"GET", "/rollouts"}, {"GET", "/rollouts/ro-1"}, {"POST", "/rollouts/ro-1/pause"}, {"GET", "/operations"},
		{"GET", "/operations/ro-1"}, {"GET", "/operations/ro-1/log"},
	} {
		r := s.do(c.method, base+c.path, tn.operator, nil, nil, nil)
		if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.problem().Detail, "cmd.") {
			t.Errorf("%s %s without the rollout service: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "workers"}, nil, nil); r.status != 503 {
		t.Errorf("start without the rollout service: %d %s", r.status, r.body)
	}
	// the event stream refuses before it starts: a problem, not a stream
	r := s.do("GET", base+"/operations/ro-1/log", tn.viewer, nil, map[string]string{"Accept": "text/event-stream"}, nil)
	if r.status != 503 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("stream without the rollout service: %d %s", r.status, r.body)
	}
	// roles: a viewer reads but may not start or control
	if r := s.do("POST", base+"/rollouts", tn.viewer, map[string]any{"pool": "workers"}, nil, nil); r.status != 403 {
		t.Errorf("viewer starts a rollout: %d", r.status)
	}
	if r := s.do("POST", base+"/rollouts/ro-1/abort", tn.viewer, nil, nil, nil); r.status != 403 {
		t.Errorf("viewer aborts a rollout: %d", r.status)
	}
	if r := s.do("GET", base+"/rollouts", "", nil, nil, nil); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
	if r := s.do("GET", base+"/operations/ro-1/log", tn.otherAdmin, nil, nil, nil); r.status != 404 {
		t.Errorf("another org's admin: %d", r.status)
	}
}

// Success paths against a canned rollout responder on real NATS.
// TODO: replace with the real rollout service once it lands.
func TestRolloutRoutes(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	fake := newFakeRollout(t, s.nc)
	base := "/api/v1/orgs/acme"

	var ro rolloutapi.Rollout
	r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "workers", "revision": 2, "machine": strings.ToUpper(uuidN(1)), "after": "ro-1"},
		map[string]string{"Idempotency-Key": "start-1"}, &ro)
	if r.status != 201 || ro.ID != "ro-2" || r.header.Get("ETag") != `"41"` {
		t.Fatalf("start: %d %s etag %s", r.status, r.body, r.header.Get("ETag"))
	}
	sent := fake.last(rolloutapi.SubjectStart).(rolloutapi.StartRequest)
	if sent.Org != "acme" || sent.Machine != uuidN(1) || sent.After != "ro-1" || !strings.Contains(sent.RequestedBy, "(operator-bot)") {
		t.Fatalf("start request: %+v", sent)
	}
	if r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "missing"}, nil, nil); r.status != 404 {
		t.Fatalf("start on a missing pool: %d %s", r.status, r.body)
	}

	var list rolloutapi.RolloutList
	if r := s.do("GET", base+"/rollouts?pool=workers&status=active&limit=10", tn.viewer, nil, nil, &list); r.status != 200 || len(list.Items) != 2 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if q := fake.last(rolloutapi.SubjectList).(rolloutapi.ListRequest); q.Status != "active" || q.Limit != 10 || q.Pool != "workers" {
		t.Fatalf("list request: %+v", q)
	}
	r = s.do("GET", base+"/rollouts/ro-1", tn.viewer, nil, nil, &ro)
	if r.status != 200 || ro.Status != "running" || ro.Progress.Total != 3 || r.header.Get("ETag") != `"40"` {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	etag := r.header.Get("ETag")
	if r := s.do("GET", base+"/rollouts/ro-1?at=2026-11-02T09:00:00Z", tn.viewer, nil, nil, &ro); r.status != 200 || ro.Status != "pending" {
		t.Fatalf("time travel: %d %s", r.status, r.body)
	}
	if q := fake.last(rolloutapi.SubjectGet).(rolloutapi.GetRequest); q.At != "2026-11-02T09:00:00Z" {
		t.Fatalf("at not passed on: %+v", q)
	}
	if r := s.do("GET", base+"/rollouts/ro-9", tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("missing rollout: %d", r.status)
	}

	// controls: If-Match becomes expected_version; stale is 412, a state that forbids it 409
	r = s.do("POST", base+"/rollouts/ro-1/pause", tn.operator, map[string]any{"reason": "lunch"}, map[string]string{"If-Match": etag}, &ro)
	if r.status != 200 || ro.Status != "paused" || r.header.Get("ETag") != `"41"` {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if c := fake.last(rolloutapi.SubjectPause).(rolloutapi.ControlRequest); c.ExpectedVersion != 40 || c.Reason != "lunch" || !strings.Contains(c.By, "operator-bot") {
		t.Fatalf("pause request: %+v", c)
	}
	if r := s.do("POST", base+"/rollouts/ro-1/resume", tn.operator, nil, map[string]string{"If-Match": etag}, nil); r.status != 412 {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/rollouts/ro-1/retry", tn.operator, nil, nil, nil); r.status != 409 || !strings.Contains(r.problem().Detail, "paused") {
		t.Fatalf("retry a paused rollout: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/rollouts/ro-1/resume", tn.operator, "  ", nil, nil); r.status != 200 {
		t.Fatalf("resume with a blank body: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/rollouts/ro-1/abort", tn.admin, nil, nil, nil); r.status != 200 {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}

	// operations
	var ops rolloutapi.OperationList
	if r := s.do("GET", base+"/operations?kind=rollout", tn.viewer, nil, nil, &ops); r.status != 200 || len(ops.Items) != 2 {
		t.Fatalf("operations: %d %s", r.status, r.body)
	}
	var op rolloutapi.Operation
	if r := s.do("GET", base+"/operations/ro-1", tn.viewer, nil, nil, &op); r.status != 200 || op.Rollout == nil || op.LogLength != 2 || r.header.Get("ETag") == "" {
		t.Fatalf("operation: %d %s", r.status, r.body)
	}
	var page rolloutapi.LogPage
	if r := s.do("GET", base+"/operations/ro-1/log?after=1&limit=5", tn.viewer, nil, nil, &page); r.status != 200 || len(page.Entries) != 1 || page.Next != 2 || page.Final {
		t.Fatalf("log page: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/operations/ro-9/log", tn.viewer, nil, map[string]string{"Accept": "text/event-stream"}, nil); r.status != 404 ||
		r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("stream of a missing operation: %d %s", r.status, r.body)
	}
}

type sseEvent struct{ id, event, data string }

// openStream opens the log's event stream and returns its events as they
// come.
func openStream(t *testing.T, ctx context.Context, url, tok string, hdr map[string]string) (<-chan sseEvent, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan sseEvent, 100)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch, res
}

func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
	}
	return sseEvent{}
}

// The log's live Server-Sent Events stream, against the canned responder.
// TODO: replace with the real rollout service once it lands.
func TestOperationLogStream(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	fake := newFakeRollout(t, s.nc)
	url := s.base + "/api/v1/orgs/acme/operations/ro-1/log"
	ctx := t.Context()

	ch, res := openStream(t, ctx, url, tn.viewer, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header)
	}
	for i, want := range []string{"0", "1"} {
		if ev := next(t, ch); ev.id != want || ev.event != "" || !strings.Contains(ev.data, `"outcome"`) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if ev := next(t, ch); ev.event != "status" || !strings.Contains(ev.data, `"status":"running"`) {
		t.Fatalf("status event: %+v", ev)
	}
	fake.appendLog("ro-1", operation.Entry{At: time.Now().UTC(), Node: "w1", Step: "drain", Outcome: operation.LogBegun}, false)
	if ev := next(t, ch); ev.id != "2" || !strings.Contains(ev.data, `"drain"`) {
		t.Fatalf("live event: %+v", ev)
	}
	fake.appendLog("ro-1", operation.Entry{At: time.Now().UTC(), Outcome: operation.LogDone}, true)
	if ev := next(t, ch); ev.id != "3" || !strings.Contains(ev.data, `"done"`) {
		t.Fatalf("last entry: %+v", ev)
	}
	if ev := next(t, ch); ev.event != "end" || !strings.Contains(ev.data, `"succeeded"`) {
		t.Fatalf("end: %+v", ev)
	}
	if _, open := <-ch; open {
		t.Fatal("the stream goes on after its end")
	}

	// Last-Event-ID resumes after the last event received
	ch, _ = openStream(t, ctx, url, tn.viewer, map[string]string{"Last-Event-ID": "2"})
	if ev := next(t, ch); ev.id != "3" || ev.event != "" {
		t.Fatalf("resumed: %+v", ev)
	}
	if ev := next(t, ch); ev.event != "end" {
		t.Fatalf("resumed end: %+v", ev)
	}

	// a client that goes away stops the long polls
	sctx, cancel := context.WithCancel(ctx)
	if r := s.do("POST", "/api/v1/orgs/acme/rollouts", tn.operator, map[string]any{"pool": "workers"}, nil, nil); r.status != 201 {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	ch, _ = openStream(t, sctx, s.base+"/api/v1/orgs/acme/operations/ro-2/log", tn.viewer, nil)
	time.Sleep(500 * time.Millisecond) // a few long polls
	cancel()
	for range ch {
	}
	// Once the gateway noticed, the polls stop: wait for two equal counts a
	// few long polls apart.
	deadline := time.Now().Add(20 * time.Second)
	for {
		before := fake.logPolls()
		time.Sleep(4 * fake.maxWait)
		if fake.logPolls() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway keeps polling the log of a stream whose client went away")
		}
	}
}
