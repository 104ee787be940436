package machineop

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStepsOf(t *testing.T) {
	cases := []struct {
		kind    Kind
		hasNode bool
		want    []Step
	}{
		{KindMaintenanceEnter, true, []Step{StepCordon, StepDrain, StepComplete}},
		{KindMaintenanceEnter, false, []Step{StepComplete}},
		{KindMaintenanceExit, true, []Step{StepUncordon}},
		{KindMaintenanceExit, false, nil},
		{KindUnassign, true, []Step{StepCordon, StepDrain, StepDeleteNode, StepComplete}},
		{KindUnassign, false, []Step{StepComplete}},
		{KindForceUnassignCleanup, true, []Step{StepDeleteNode}},
		{KindForceUnassignCleanup, false, nil},
		{KindForcedDeletionCleanup, true, []Step{StepDeleteNode}},
		{KindDeletion, true, []Step{StepCordon, StepDrain, StepPrepared, StepDeleteNode, StepComplete}},
		{KindDeletion, false, []Step{StepPrepared, StepComplete}},
		{KindDeletionFinish, true, []Step{StepDeleteNode, StepComplete}},
		{KindDeletionAbort, true, []Step{StepUncordon, StepComplete}},
		{Kind("nonsense"), true, nil},
	}
	for _, c := range cases {
		if got := StepsOf(c.kind, c.hasNode); !slices.Equal(got, c.want) {
			t.Errorf("StepsOf(%s, %v) = %v, want %v", c.kind, c.hasNode, got, c.want)
		}
	}
}

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func started(kind Kind) Started {
	return Started{ID: "op-1", Kind: kind, Machine: "m", Node: "n1", Cluster: "c", Steps: StepsOf(kind, true),
		DrainTimeout: 10 * time.Minute, Cause: "machine.x e1", At: t0}
}

// drive runs Next and applies what it proposes, reporting every action a
// success, and returns the steps it acted on.
func drive(t *testing.T, s *State, now time.Time) []Step {
	t.Helper()
	var acted []Step
	for i := 0; i < 50; i++ {
		evs, act := Next(*s, now)
		for _, e := range evs {
			s.Apply(e)
		}
		if act {
			acted = append(acted, s.Step())
			s.Apply(StepSucceeded{Step: s.Step(), At: now})
		}
		if len(evs) == 0 && !act {
			return acted
		}
	}
	t.Fatal("the operation never ended")
	return nil
}

func TestAnOperationWalksItsSteps(t *testing.T) {
	for _, k := range []Kind{KindMaintenanceEnter, KindMaintenanceExit, KindUnassign, KindDeletion, KindDeletionFinish, KindDeletionAbort} {
		var s State
		s.Apply(started(k))
		acted := drive(t, &s, t0)
		if !slices.Equal(acted, StepsOf(k, true)) || s.Status != StatusSucceeded {
			t.Errorf("%s: acted %v, status %s", k, acted, s.Status)
		}
		// Final: nothing more, and later events change nothing.
		if evs, act := Next(s, t0); evs != nil || act {
			t.Errorf("%s: a finished operation proposes %v %v", k, evs, act)
		}
		n := len(s.Log)
		s.Apply(Failed{Step: StepDrain, Reason: "late", At: t0})
		if s.Status != StatusSucceeded || len(s.Log) != n {
			t.Errorf("%s: a late failure changed a finished operation", k)
		}
	}
}

func TestATimedOutDrainFailsNamingTheBudget(t *testing.T) {
	var s State
	s.Apply(started(KindMaintenanceEnter))
	s.Apply(StepStarted{Step: StepCordon, Deadline: t0.Add(time.Minute), At: t0})
	s.Apply(StepSucceeded{Step: StepCordon, At: t0})
	s.Apply(StepStarted{Step: StepDrain, Deadline: t0.Add(10 * time.Minute), At: t0})
	s.Apply(DrainBlocked{Pod: "shop/cart-0", Budget: "shop/cart", WaitedFor: 3 * time.Minute, At: t0.Add(3 * time.Minute)})
	if evs, act := Next(s, t0.Add(5*time.Minute)); evs != nil || !act {
		t.Fatalf("before the deadline: %v %v", evs, act)
	}
	evs, _ := Next(s, t0.Add(10*time.Minute))
	if len(evs) != 1 {
		t.Fatalf("at the deadline: %v", evs)
	}
	f, ok := evs[0].(Failed)
	if !ok || !f.TimedOut || !strings.Contains(f.Reason, "drain timed out after 10m0s; pod shop/cart-0 was blocked by PodDisruptionBudget shop/cart; the node stays cordoned") {
		t.Fatalf("failure %+v", evs[0])
	}
	s.Apply(f)
	if s.Status != StatusFailed || !s.Status.Final() {
		t.Fatalf("status %s", s.Status)
	}
}

func TestOutOfPlaceEventsAreIgnored(t *testing.T) {
	var s State
	s.Apply(StepSucceeded{Step: StepCordon, At: t0}) // before Started
	if s.Exists() {
		t.Fatal("an event before Started made an operation")
	}
	s.Apply(&Started{ID: "op-1", Kind: KindUnassign, Machine: "m", Steps: StepsOf(KindUnassign, true), DrainTimeout: time.Minute, At: t0})
	s.Apply(StepSucceeded{Step: StepDrain, At: t0})                                         // not the current step
	s.Apply(StepStarted{Step: StepDrain, Deadline: t0, At: t0})                             // not the current step
	s.Apply(DrainBlocked{Pod: "p", Budget: "b", At: t0})                                    // no drain running
	s.Apply(Started{ID: "op-2", Kind: KindDeletion, Machine: "x", DrainTimeout: 1, At: t0}) // a second start
	if s.Current != 0 || s.Running || s.Blocked != nil || s.ID != "op-1" {
		t.Fatalf("state %+v", s)
	}
	var nilStarted *Started
	s.Apply(nilStarted)
	s.Apply(Cancelled{Reason: "aborted", At: t0})
	if s.Status != StatusCancelled {
		t.Fatalf("status %s", s.Status)
	}
}

func TestValidate(t *testing.T) {
	if err := (Started{}).Validate(); err == nil || !strings.Contains(err.Error(), "id") || !strings.Contains(err.Error(), "kind") {
		t.Fatalf("empty start: %v", err)
	}
	if err := started(KindDeletion).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestBestEffortCleanupSaysWhatIsLeft(t *testing.T) {
	s := State{}
	s.Apply(started(KindForcedDeletionCleanup))
	evs, _ := Next(s, t0)
	for _, e := range evs {
		s.Apply(e)
	}
	evs, _ = Next(s, s.Deadline)
	f, ok := evs[0].(Failed)
	if !ok || !strings.Contains(f.Reason, "node n1 is left in cluster c") || strings.Contains(f.Reason, "stays cordoned") {
		t.Fatalf("a timed-out clean-up must say which node is left where: %+v", evs)
	}
	if !KindForcedDeletionCleanup.BestEffort() || KindUnassign.BestEffort() {
		t.Fatal("only the clean-ups after the registry let go are best effort")
	}
}
