package e2e_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// traceSpans returns the ended spans of one trace.
func traceSpans(id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// hop is one link of the chain the Save & Apply request's trace must hold.
type hop struct {
	service, what string
	match         func(sdktrace.ReadOnlySpan) bool
}

// checkTrace: the trace of the Save & Apply HTTP request holds spans from
// the gateway, the revisions service, the rollout service (its apply
// handler and its driver issuing the reboot) and the boot service (storing
// the instruction, and handing it to the agent).
func checkTrace(t *testing.T, id trace.TraceID, rolloutID string) {
	t.Helper()
	hops := []hop{
		{"gateway", "the HTTP request PUT …/pools/{pool}", func(s sdktrace.ReadOnlySpan) bool {
			// otelhttp's span, named by the route's pattern
			return s.SpanKind() == trace.SpanKindServer && strings.HasPrefix(s.Name(), "PUT ") && strings.HasSuffix(s.Name(), "/api/v1/orgs/{org}/pools/{pool}")
		}},
		{"revisions", "the command cmd.revisions.pool.update", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "handle cmd.revisions.pool.update"
		}},
		{"rollout", "the handler of pool.apply_requested (rollout-start-on-apply)", func(s sdktrace.ReadOnlySpan) bool {
			return attr(s, "anvil.handler") == "rollout-start-on-apply"
		}},
		{"rollout", "the driver issuing a reboot (rollout issue_reboot)", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "rollout issue_reboot" && attr(s, "anvil.rollout") == rolloutID
		}},
		{"boot", "the handler storing the reboot instruction (boot-instructions-rollout)", func(s sdktrace.ReadOnlySpan) bool {
			return attr(s, "anvil.handler") == "boot-instructions-rollout"
		}},
		// The agent's long poll is its own request (the agent starts no
		// trace); the boot service records handing the instruction out as
		// a span of the requesting trace, linked to that poll's span.
		{"boot → agent", "the instruction handed to the agent's long poll (deliver instruction, linked to GET /agent/v1/machines/{uuid}/instructions)", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "deliver instruction" && attr(s, "anvil.instruction_id") != ""
		}},
	}
	missing := func() []hop {
		ss := traceSpans(id)
		var out []hop
		for _, h := range hops {
			found := false
			for _, s := range ss {
				found = found || h.match(s)
			}
			if !found {
				out = append(out, h)
			}
		}
		return out
	}
	// spans end a moment after the work they describe
	deadline := time.Now().Add(20 * time.Second)
	m := missing()
	for len(m) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		m = missing()
	}
	if len(m) == 0 {
		return
	}
	names := map[string]int{}
	for _, s := range traceSpans(id) {
		k := s.Name()
		if h := attr(s, "anvil.handler"); h != "" {
			k += " [" + h + "]"
		}
		names[k]++
	}
	var lines []string
	for n, c := range names {
		lines = append(lines, fmt.Sprintf("  %4d × %s", c, n))
	}
	sort.Strings(lines)
	var miss []string
	for _, h := range m {
		miss = append(miss, h.service+": "+h.what)
	}
	t.Errorf("the Save & Apply trace %s lacks spans of:\n  %s\nit holds:\n%s", id, strings.Join(miss, "\n  "), strings.Join(lines, "\n"))
}
