package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The server refuses a message over its maximum payload (1 MiB by
// default): a failed or aborted rollout whose machines' reports do not fit
// in one event reports the rest in MachinesReported events before it, so
// that it can end; every machine's report is in them, in order, once.
func TestFinishReportsFitTheMaximumPayload(t *testing.T) {
	const maxPayload = 1 << 20
	// Reasons of the longest allowed size, every byte of which JSON
	// escapes (six bytes each): the worst a report can be.
	long := strings.Repeat("<", 1024)
	tests := []struct {
		name     string
		machines int
		finish   func(t *testing.T, s *State) []any
		final    string
		split    bool
	}{
		{"a small aborted rollout: one event, as before", 50, func(t *testing.T, s *State) []any {
			return must(t, s, Abort{}, t0)
		}, "rollout.aborted", false},
		{"10,000 machines aborted before any began", 10000, func(t *testing.T, s *State) []any {
			return must(t, s, Abort{}, t0)
		}, "rollout.aborted", true},
		{"300 machines failed with the longest reasons", 300, func(t *testing.T, s *State) []any {
			order := rolloutOrder(s)
			for _, i := range order {
				walk(t, s, i, StepCordon, t0)
			}
			var evs []any
			for _, i := range order {
				m, _ := s.Machine(uuidOf(i))
				evs = must(t, s, FailStep{Machine: uuidOf(i), Step: StepCordon, Attempt: m.Attempt, Reason: long}, t0)
			}
			return evs
		}, "rollout.failed", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := running(t, tt.machines, "100%")
			order := rolloutOrder(&s)
			evs := tt.finish(t, &s)
			var reported []MachineReport
			split := false
			for i, e := range evs {
				data, err := json.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				if len(data) > maxPayload/2+64<<10 {
					t.Errorf("event %d (%s) encodes to %d bytes; the bound is half the %d of the server's payload", i, types([]any{e})[0], len(data), maxPayload)
				}
				switch e := e.(type) {
				case MachinesReported:
					split = true
					reported = append(reported, e.Machines...)
				case Failed:
					reported = append(reported, e.Machines...)
				case Aborted:
					reported = append(reported, e.Machines...)
				}
			}
			if got := types(evs[len(evs)-1:])[0]; got != tt.final || s.Outcome == "" {
				t.Fatalf("last event %s, outcome %q; want %s and a finished rollout", got, s.Outcome, tt.final)
			}
			if split != tt.split {
				t.Fatalf("reports split over MachinesReported: %v; want %v", split, tt.split)
			}
			if len(reported) != tt.machines {
				t.Fatalf("%d machine reports; want every machine's, %d", len(reported), tt.machines)
			}
			for i, r := range reported {
				if r.UUID != uuidOf(order[i]) {
					t.Fatalf("report %d is of %s; want %s (every machine once, in the rollout's order)", i, r.UUID, uuidOf(order[i]))
				}
			}
		})
	}
}

// rolloutOrder is the fixture numbers of s's machines in the rollout's
// order (by hostname: m100 before m11).
func rolloutOrder(s *State) []int {
	var order []int
	for _, m := range s.Machines {
		var i int
		if _, err := fmt.Sscanf(m.UUID, "00000000-0000-4000-8000-%d", &i); err == nil {
			order = append(order, i)
		}
	}
	return order
}
