package projection

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// sampleCount is the number of observations of histogram name with label
// projection=projection in the default registry; -1 if it has no series.
func sampleCount(t *testing.T, name, projection string) int64 {
	t.Helper()
	m := eventstest.Metric(t, name, map[string]string{"projection": projection})
	if m == nil {
		return -1
	}
	return int64(m.GetHistogram().GetSampleCount())
}

// TestLagSecondsSkipsTheReplay: anvil_projection_lag_seconds has its
// series as soon as the runner exists, ignores the events replayed at
// start (they may be days old), and observes each event applied once the
// projection has caught up.
func TestLagSecondsSkipsTheReplay(t *testing.T) {
	env := eventstest.Start(t, registry())
	last := fill(t, env.Store, 3, 4)
	model := newSums()
	r := NewRunner(Config{Name: "lag-seconds"}, env.JS, registry(), model, nil, nil)
	if n := sampleCount(t, "anvil_projection_lag_seconds", "lag-seconds"); n != 0 {
		t.Fatalf("before the first event: %d observations, want a series with 0", n)
	}
	stop := runUntil(t, r, last)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sampleCount(t, "anvil_projection_lag_seconds", "lag-seconds"); n != 0 {
		t.Fatalf("the replay at start was observed: %d observations", n)
	}
	envs, err := env.Store.Append(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: "m9"}, events.Any, events.New(added{N: 1}, added{N: 2})...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, envs[1].Sequence); err != nil {
		t.Fatal(err)
	}
	// The checkpoint moves in Apply, the observation right after it.
	eventstest.Eventually(t, "both live events observed", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		n := sampleCount(t, "anvil_projection_lag_seconds", "lag-seconds")
		return n == 2, fmt.Sprintf("%d observations, want 2", n)
	})
}
