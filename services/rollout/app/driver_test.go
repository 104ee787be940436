package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// A driver told of nothing on the bus (every notice lost) still sees an
// operator's abort: it reads the log on its own once Replan passed, and
// the rollout winds down.
func TestDriverReadsTheLogWhenNoticesAreLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg := rolloutRegistry()
	store := events.NewMemoryStore(reg)
	a := &App{Store: store, Events: reg, Registry: poolMachines{}, Rollouts: noRollouts{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Settings: Settings{Replan: 50 * time.Millisecond}}
	a.Defaults()
	startTestRollout(t, a)
	// Paused, the rollout proposes nothing: its driver only waits.
	if _, err := a.Control(ctx, "acme", "ro-1", 0, rollout.Pause{By: "op"}); err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() { driven <- a.Drive(ctx, "acme", "ro-1") }()
	eventstest.Eventually(t, "the driver runs", time.Minute, 10*time.Millisecond, func() (bool, string) {
		return len(a.Driving()) == 1, "not yet"
	})
	// Nothing calls a.RolloutEvent: the abort's notice is lost.
	if _, err := a.Control(ctx, "acme", "ro-1", 0, rollout.Abort{By: "op", Reason: "give up"}); err != nil {
		t.Fatal(err)
	}
	if err := <-driven; err != nil {
		t.Fatalf("the driver did not finish the aborted rollout: %v", err)
	}
	s, _, err := a.rollouts().Load(ctx, ref("acme", "ro-1"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Status() != rollout.StatusAborted {
		t.Fatalf("status %s, want aborted", s.Status())
	}
}
