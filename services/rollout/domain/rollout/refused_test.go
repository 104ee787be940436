package rollout

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/fields"
)

func fxRefuse() RefuseStart {
	return RefuseStart{ID: "r1", Pool: "workers", Cluster: "c1", Revision: 2, RequestedBy: "token:t1",
		Reason: "cannot start: validation failed (strategy.drain_timeout: must be at least 1s, got 500ms)"}
}

func refused(t *testing.T) State {
	var s State
	must(t, &s, fxRefuse(), t0)
	return s
}

func TestRefuseStartFolds(t *testing.T) {
	s := refused(t)
	c := fxRefuse()
	if !s.Exists() || !s.Refused || s.Status() != StatusFailed || s.Reason != c.Reason || s.ID != "r1" ||
		s.Pool != "workers" || s.Cluster != "c1" || s.Revision != 2 || s.RequestedBy != "token:t1" ||
		!s.StartedAt.Equal(t0) || !s.FinishedAt.Equal(t0) || len(s.Machines) != 0 {
		t.Fatalf("refused state: %+v", s)
	}
	if s.Active() || !s.Over() {
		t.Error("a refused rollout holds nothing and is over")
	}
	if outcome, _ := s.Finishing(); outcome != "" {
		t.Errorf("a refused rollout has nothing to finish, got %s", outcome)
	}
	// Nothing folds into it afterwards, and it does not replace a started one.
	before := s.Clone()
	for _, e := range []any{
		Started{ID: "r1", Pool: "workers", Revision: 2, Machines: fxMachines(1)}, StartRefused{ID: "r1", Reason: "other"},
		ChecksRecorded{Results: passing()}, Paused{}, AbortRequested{}, Retried{}, Succeeded{At: t0}, Aborted{At: t0},
	} {
		s.Apply(e)
	}
	if !reflect.DeepEqual(before, s) {
		t.Errorf("events after the refusal changed it:\n%+v\n%+v", before, s)
	}
	var started State
	must(t, &started, fxStart(1, "1"), t0)
	was := started.Clone()
	started.Apply(StartRefused{ID: "r1", Reason: "late"})
	if !reflect.DeepEqual(was, started) || started.Refused {
		t.Error("a refusal after the start must be ignored")
	}
}

func TestRefuseStartDecisions(t *testing.T) {
	blank := func(*testing.T) State { return State{} }
	start := func(t *testing.T) State {
		var s State
		must(t, &s, fxStart(1, "1"), t0)
		return s
	}
	withID := func(id string) RefuseStart { c := fxRefuse(); c.ID = id; return c }
	withReason := func(r string) RefuseStart { c := fxRefuse(); c.Reason = r; return c }
	// want: event types, "·" for a no-op, or the error's kind and a part
	// of its message.
	cases := []struct {
		name  string
		state func(*testing.T) State
		cmd   Command
		want  string
	}{
		{"refuse a new rollout", blank, fxRefuse(), "rollout.start_refused"},
		{"refuse again (redelivery)", refused, fxRefuse(), "·"},
		{"refuse again with another reason", refused, withReason("cannot start: something else"), "·"},
		{"refuse one that started", start, fxRefuse(), "conflict: rollout r1 started already"},
		{"refuse with a bad id", blank, withID("bad id"), "validation: id"},
		{"refuse without a reason", blank, withReason("  "), "validation: reason"},
		{"start a refused one", refused, fxStart(1, "1"), "conflict: rollout r1 already exists"},
		{"pause a refused one", refused, Pause{}, "conflict: rollout r1 is refused (cannot start: validation failed"},
		{"resume a refused one", refused, Resume{}, "conflict: it never started"},
		{"abort a refused one", refused, Abort{By: "x"}, "conflict: apply the revision again"},
		{"retry a refused one", refused, Retry{}, "conflict: it never started"},
		{"finish a refused one", refused, Finish{}, "conflict: it never started"},
		{"begin a machine of a refused one", refused, BeginMachine{Machine: uuidOf(1)}, "conflict: it never started"},
		{"resolve a refused one's dependency", refused, ResolveDependency{Rollout: "r0", Outcome: StatusSucceeded}, "conflict: it never started"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state(t)
			evs, err := Decide(s, tc.cmd, t0)
			var got string
			switch {
			case err != nil:
				got = string(errs.KindOf(err)) + ": " + err.Error()
				if e := errs.As(err); len(e.Fields) > 0 {
					got = string(e.Kind) + ": " + e.Fields[0].Field
				}
			case len(evs) == 0:
				got = "·"
			default:
				got = strings.Join(types(evs), " ")
			}
			if kind, part, ok := strings.Cut(tc.want, ": "); ok {
				if !strings.HasPrefix(got, kind+": ") || !strings.Contains(got, part) {
					t.Errorf("got %q, want %q", got, tc.want)
				}
			} else if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRefusalReasonIsOneLine(t *testing.T) {
	cases := []struct {
		name, reason, want string
	}{
		{"plain", "cannot start: pool: must be a DNS label", "cannot start: pool: must be a DNS label"},
		{"escape sequence and newline", "cannot start: host \x1b[2Jx\nnext", `cannot start: host \u001B[2Jx\u000Anext`},
		{"direction override", "cannot start: a\u202eb", `cannot start: a\u202Eb`},
		{"invalid UTF-8", "cannot start: \xff", "cannot start: \uFFFD"},
		{"too long", strings.Repeat("é", fields.MaxReason), strings.Repeat("é", (fields.MaxReason-len("…"))/2) + "…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fxRefuse()
			c.Reason = tc.reason
			evs, err := Decide(State{}, c, t0)
			if err != nil {
				t.Fatal(err)
			}
			got := evs[0].(StartRefused).Reason
			if got != tc.want {
				t.Errorf("reason %q, want %q", got, tc.want)
			}
			if err := fields.Text(got, fields.MaxReason, false); err != nil {
				t.Errorf("the recorded reason breaks the rule for log text: %v", err)
			}
		})
	}
}

func TestRefusedRoundTripJSON(t *testing.T) {
	evs, err := Decide(State{}, fxRefuse(), t0)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	var back StartRefused
	if err := json.Unmarshal(raw, &back); err != nil || !reflect.DeepEqual(back, evs[0]) {
		t.Fatalf("%s: %+v %v", raw, back, err)
	}
	var a, b State
	a.Apply(evs[0])
	b.Apply(&back)
	js, _ := json.Marshal(a)
	var c State
	if err := json.Unmarshal(js, &c); err != nil || !reflect.DeepEqual(a, b) || !c.Refused || c.Active() {
		t.Errorf("state from decoded events differs or loses the refusal: %s", js)
	}
}
