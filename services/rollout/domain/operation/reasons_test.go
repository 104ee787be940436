package operation

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// TestControlReasonsKept: the reason an operator gives to pause, resume
// and retry (the API's {"reason"}, anvilctl's --reason) is in the event
// the command appends (what the audit shows) and in the operation's log,
// with who gave it.
func TestControlReasonsKept(t *testing.T) {
	strategy := rollout.Strategy{PoolSettings: rollout.PoolSettings{MaxUnavailable: "1"}}.WithDefaults()
	evs := []any{
		rollout.Started{ID: "r1", Pool: "workers", Revision: 2, PoolSize: 1, Strategy: strategy, RequestedBy: "token:t1 (ops)", At: t0,
			Machines: []rollout.Machine{{UUID: uuidOf(1), Hostname: "m01"}}},
		rollout.ChecksRecorded{At: t0, Results: []rollout.CheckResult{{Name: rollout.CheckClusterReachable, Passed: true}}},
	}
	var s rollout.State
	for _, e := range evs {
		s.Apply(e)
	}
	decide := func(c rollout.Command, now time.Time) {
		t.Helper()
		out, err := rollout.Decide(s, c, now)
		if err != nil || len(out) != 1 {
			t.Fatalf("%s: %v %v", c.CommandType(), out, err)
		}
		for _, e := range out {
			s.Apply(e)
		}
		evs = append(evs, out...)
	}
	apply := func(es ...any) {
		for _, e := range es {
			s.Apply(e)
		}
		evs = append(evs, es...)
	}
	const who = "token:t2 (oncall)"
	decide(rollout.Pause{By: who, Reason: "lunch"}, t0.Add(time.Minute))
	decide(rollout.Resume{By: who, Reason: "back from lunch"}, t0.Add(2*time.Minute))
	apply(rollout.MachineBegun{Machine: uuidOf(1), At: t0.Add(2 * time.Minute)},
		rollout.StepStarted{Machine: uuidOf(1), Step: rollout.StepCordon, Attempt: 1, Deadline: t0.Add(7 * time.Minute), At: t0.Add(2 * time.Minute)},
		rollout.StepFailed{Machine: uuidOf(1), Step: rollout.StepCordon, Attempt: 1, Reason: "forbidden", At: t0.Add(3 * time.Minute)})
	decide(rollout.Retry{By: who, Reason: "RBAC fixed"}, t0.Add(4*time.Minute))

	for _, c := range []struct {
		event  any
		reason string
	}{{rollout.Paused{}, "lunch"}, {rollout.Resumed{}, "back from lunch"}, {rollout.Retried{}, "RBAC fixed"}} {
		var found bool
		for _, e := range evs {
			if typeOf(e) != typeOf(c.event) {
				continue
			}
			found = true
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"reason":"`+c.reason+`"`) || !strings.Contains(string(b), `"by":"`+who+`"`) {
				t.Errorf("%T as stored: %s; want reason %q and by %q", e, b, c.reason, who)
			}
		}
		if !found {
			t.Errorf("no %T appended", c.event)
		}
	}

	var got []string
	for _, e := range Project(evs).Log {
		got = append(got, e.String())
	}
	log := strings.Join(got, "\n")
	for _, want := range []string{
		"2025-06-02T09:01:00Z paused: no new machine begins; machines already begun finish; by " + who + "; lunch",
		"2025-06-02T09:02:00Z resumed: by " + who + "; back from lunch",
		"2025-06-02T09:04:00Z retried: failed machines resume at the step that failed; by " + who + "; RBAC fixed",
	} {
		if !strings.Contains(log, want+"\n") && !strings.HasSuffix(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

func typeOf(e any) string { return e.(interface{ EventType() string }).EventType() }
