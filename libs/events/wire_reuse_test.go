package events

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// TestReusedHeadersAsFresh: an append's pooled message keeps its header
// keys from one event to the next, so each message it carries must have
// exactly the headers of a message built afresh, whichever headers the
// one before had.
func TestReusedHeadersAsFresh(t *testing.T) {
	full := Envelope{ID: "e1", Type: "t.one", SchemaVersion: 2, Time: time.Unix(1, 0).UTC(),
		Actor: "token:t1 (bob)", CorrelationID: "c1", CausationID: "e0",
		Trace: map[string]string{headerTraceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", headerTracestate: "k=v"}}
	bare := Envelope{ID: "e2", Type: "t.two", SchemaVersion: 1, Time: time.Unix(2, 0).UTC()}
	ops := map[string]appendOp{
		"full, expected":  {subject: "events.a.b.c", timeText: "x", expected: 7, envs: []Envelope{full}},
		"bare, any":       {subject: "events.a.b.d", timeText: "y", expected: Any, envs: []Envelope{bare}},
		"chained":         {subject: "events.a.b.c", timeText: "z", expected: 7, envs: []Envelope{full, bare}},
		"bare, expected0": {subject: "events.a.b.e", timeText: "w", expected: 0, envs: []Envelope{bare}},
	}
	fill := func(out *outgoing, name string) {
		op := ops[name]
		if name == "chained" {
			op.fillAt(1, true, &out.msg, &out.h)
			return
		}
		op.fill(&out.msg, &out.h)
	}
	names := slices.Sorted(maps.Keys(ops))
	for _, before := range names {
		for _, name := range names {
			reused, fresh := newOutgoing(), newOutgoing()
			fill(reused, before)
			clear(reused.h.values[:]) // as release does, without pooling it
			fill(reused, name)
			fill(fresh, name)
			if !maps.EqualFunc(reused.msg.Header, fresh.msg.Header, slices.Equal) {
				t.Errorf("%s after %s: headers\n%v\nwant\n%v", name, before, reused.msg.Header, fresh.msg.Header)
			}
			if reused.msg.Subject != fresh.msg.Subject {
				t.Errorf("%s after %s: subject %q, want %q", name, before, reused.msg.Subject, fresh.msg.Subject)
			}
		}
	}
}
