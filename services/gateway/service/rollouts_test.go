package service_test

import (
	"bufio"
	"context"
	"fmt"
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

// The success paths of the rollout and operation routes run against the
// real rollout service and a simulated fleet: TestRolloutsWithFleet.

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

// A stream whose client goes away stops the gateway's long polls of the
// rollout service. This one needs a rollout service that counts the polls,
// so it runs against a canned responder; the stream itself is tested
// against the real rollout service in TestRolloutsWithFleet.
func TestOperationLogStreamStopsPolling(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	fake := newFakeRollout(t, s.nc)
	ctx, cancel := context.WithCancel(t.Context())
	ch, res := openStream(t, ctx, s.base+"/api/v1/orgs/acme/operations/ro-1/log", tn.viewer, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header)
	}
	for i, want := range []string{"0", "1"} {
		if ev := next(t, ch); ev.id != want || !strings.Contains(ev.data, `"outcome"`) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	if ev := next(t, ch); ev.event != "status" || !strings.Contains(ev.data, `"status":"running"`) {
		t.Fatalf("status event: %+v", ev)
	}
	// live entries still come through the canned log
	fake.appendLog("ro-1", rolloutapi.Entry{At: time.Now().UTC(), Node: "w1", Step: "drain", Outcome: operation.LogBegun}, false)
	if ev := next(t, ch); ev.id != "2" || !strings.Contains(ev.data, `"drain"`) {
		t.Fatalf("live event: %+v", ev)
	}
	// a few long polls while the client is there
	polls := fake.logPolls()
	s.eventually("a few long polls of the log", func() (bool, string) {
		n := fake.logPolls()
		return n >= polls+3, fmt.Sprintf("%d polls, %d before", n, polls)
	})
	cancel()
	for range ch {
	}
	// Once the gateway noticed, the polls stop: wait for two equal counts a
	// few long polls apart (this sleep is the point: that polling stopped
	// shows only as no poll for a while).
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
