package client

import (
	"errors"
	"strings"
	"testing"
)

// TestReadLogEvents parses what the stack does not easily produce: an
// error event, a stream that closes early, comments, data over several
// lines and events the client does not know.
func TestReadLogEvents(t *testing.T) {
	r := request{method: "GET", path: "/api/v1/orgs/acme/operations/ro-1/log"}
	read := func(body string) ([]LogEvent, error) {
		var out []LogEvent
		err := readLogEvents(strings.NewReader(body), r, func(ev LogEvent, err error) bool {
			out = append(out, ev)
			return true
		})
		return out, err
	}

	evs, err := read(": waiting\n\nid: 4\ndata: {\"at\":\"2026-11-02T09:00:00Z\",\n" +
		"data: \"node\":\"w1\",\"step\":\"cordon\",\"outcome\":\"begun\"}\n\n" +
		"event: progress\ndata: {}\n\n" +
		"event: status\ndata: {\"status\":\"running\",\"next\":5}\n\n")
	if err != nil || len(evs) != 2 {
		t.Fatalf("%+v %v", evs, err)
	}
	if e := evs[0]; e.Kind != LogEventEntry || e.Index != 4 || e.Entry.String() != "2026-11-02T09:00:00Z w1 cordon begun" {
		t.Fatalf("the entry: %+v %q", e, e.Entry.String())
	}
	if e := evs[1]; e.Kind != LogEventStatus || e.Status != "running" || e.Next != 5 {
		t.Fatalf("the status: %+v", e)
	}

	// the end is the last event, whatever follows
	evs, err = read("event: end\ndata: {\"status\":\"succeeded\",\"next\":7}\n\nid: 7\ndata: {}\n\n")
	if err != nil || len(evs) != 1 || evs[0].Kind != LogEventEnd || evs[0].Status != "succeeded" || evs[0].Next != 7 {
		t.Fatalf("the end: %+v %v", evs, err)
	}

	// a failure in the stream is the problem it carries
	_, err = read("event: error\ndata: {\"type\":\"https://anvil.dev/problems/unavailable\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"rollout: no answer\"}\n\n")
	var p *Problem
	if !errors.As(err, &p) || !IsUnavailable(err) || p.Path != r.path || p.Detail != "rollout: no answer" {
		t.Fatalf("an error event: %#v", err)
	}
	_, err = read("event: error\ndata: boom\n\n")
	if p, ok := AsProblem(err); !ok || p.Status != 502 || p.Detail != "boom" {
		t.Fatalf("an error event without a problem: %#v", err)
	}

	// a stream that closes early ends without an end event and no error
	evs, err = read("id: 0\ndata: {\"at\":\"2026-11-02T09:00:00Z\",\"outcome\":\"started\"}\n\nid: 1\ndata: {\"at\":")
	if err != nil || len(evs) != 1 || evs[0].Index != 0 {
		t.Fatalf("an early close: %+v %v", evs, err)
	}

	// malformed events are errors that say what is wrong
	if _, err := read("id: x\ndata: {\"outcome\":\"started\"}\n\n"); err == nil || !strings.Contains(err.Error(), `id "x"`) {
		t.Fatalf("an entry without an index: %v", err)
	}
	if _, err := read("data: [1]\n\n"); err == nil || !strings.Contains(err.Error(), "not what the client expects") {
		t.Fatalf("an entry that is not one: %v", err)
	}

	// a loop that stops takes no more events
	n := 0
	err = readLogEvents(strings.NewReader("id: 0\ndata: {}\n\nid: 1\ndata: {}\n\n"), r, func(LogEvent, error) bool { n++; return false })
	if err != nil || n != 1 {
		t.Fatalf("stopped after %d events: %v", n, err)
	}
}
