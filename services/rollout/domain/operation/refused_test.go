package operation

import (
	"testing"

	"github.com/anvil-fleet/anvil/services/rollout/domain/plan"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// A rollout that never started shows as failed with the reason, one log
// line, no machines and no condition: nothing waits, nothing can change.
func TestViewOfARefusedRollout(t *testing.T) {
	reason := "cannot start: validation failed (strategy.drain_timeout: must be at least 1s, got 500ms)"
	v := Project([]any{rollout.StartRefused{ID: "r1", Pool: "workers", Cluster: "c1", Revision: 3, Reason: reason,
		RequestedBy: "token:t1 (ops)", At: t0}})
	if v.ID != "r1" || v.Kind != Kind || v.Pool != "workers" || v.Revision != 3 || v.Status != rollout.StatusFailed ||
		v.Reason != reason || !v.Refused || !v.Over() || v.Progress != (Progress{}) || len(v.Machines) != 0 ||
		!v.StartedAt.Equal(t0) || !v.FinishedAt.Equal(t0) {
		t.Fatalf("view: %+v", v)
	}
	want := "2025-06-02T09:00:00Z refused: pool workers, revision 3: " + reason +
		"; nothing was touched, apply again once that is fixed; requested by token:t1 (ops)"
	if len(v.Log) != 1 || v.Log[0].String() != want || v.Log[0].Outcome != LogRefused {
		t.Fatalf("log: %q\nwant %q", v.Log, want)
	}
	v.Explain(func(s rollout.State) []rollout.Block { return plan.Next(s, t0).Waiting }, t0)
	if len(v.Conditions) != 0 || !v.EstimatedDoneAt.IsZero() {
		t.Errorf("a refused rollout waits for nothing: %+v", v.Conditions)
	}
	// A redelivered refusal adds nothing.
	v.Apply(rollout.StartRefused{ID: "r1", Pool: "workers", Revision: 3, Reason: "again", At: t0})
	if len(v.Log) != 1 || v.Reason != reason {
		t.Errorf("a second refusal changed the view: %q %q", v.Reason, v.Log)
	}
}
