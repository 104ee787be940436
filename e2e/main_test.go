package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/anvil-fleet/anvil/demo/story"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/sim"
)

// spans records every span of the test process: the global tracer
// provider is set before any stack starts, so the services' spans (all in
// this process) land here.
var (
	spans    = tracetest.NewSpanRecorder()
	provider *sdktrace.TracerProvider
)

func TestMain(m *testing.M) {
	provider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	os.Exit(m.Run())
}

// startEnv starts a Kubernetes control plane and the dev stack for t; it
// returns the services' logs too, printed when a test fails.
func startEnv(t *testing.T) (*story.Env, *eventstest.SyncBuffer) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and the whole stack")
	}
	logs := &eventstest.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := story.StartEnv(ctx, story.EnvOptions{Dir: t.TempDir(), Logger: logger, KubeLogger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		if os.Getenv("ANVIL_SKIP_KUBE") == "1" && strings.Contains(err.Error(), "Kubernetes") {
			t.Skip("ANVIL_SKIP_KUBE=1:", err)
		}
		t.Fatalf("%v (build the Kubernetes binaries with `make kube-bins`)", err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("ANVIL_TEST_LOGS") != "" {
			t.Logf("services' logs (last 20000 bytes):\n%s", logs.Tail(20000))
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	return env, logs
}

// newStory starts a story in its own organization: org, cluster and pool
// (named org), n pre-registered machines that boot, provisioned by the
// first apply.
func newStory(t *testing.T, env *story.Env, org string, n int, mut func(*story.Options)) *story.Story {
	t.Helper()
	o := story.Options{Org: org, Cluster: "c1", Pool: org, Preregistered: n, StateDir: t.TempDir(),
		SimLogger: slog.New(slog.DiscardHandler),
		Sim: func(c *sim.Config) {
			c.RebootTime, c.RebootJitter = 500*time.Millisecond, 200*time.Millisecond
		}}
	if mut != nil {
		mut(&o)
	}
	s := story.New(env, o)
	ctx := ctxT(t, 3*time.Minute)
	must(t, s.CreateOrg(ctx))
	must(t, s.CreateCluster(ctx))
	_, err := s.CreatePool(ctx)
	must(t, err)
	must(t, s.StartFleet(ctx))
	t.Cleanup(s.Fleet.Stop)
	must(t, s.PreRegister(ctx))
	s.Boot(ctx)
	must(t, s.WaitRegistered(ctx, nil))
	if s.Opts.Booted > 0 {
		must(t, s.Assign(ctx))
	}
	ro, err := s.ApplyRevision(ctx, 1)
	must(t, err)
	r, err := s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if r.Status != "succeeded" || r.Progress.Done != n+s.Opts.Booted {
		t.Fatalf("provisioning of %s: %s %+v %s", org, r.Status, r.Progress, r.Reason)
	}
	return s
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eventually(t testing.TB, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	eventstest.Eventually(t, what, d, 100*time.Millisecond, cond)
}

func reboots(ms []*sim.Machine) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[m.UUID()] = len(m.Reboots())
	}
	return out
}

func all(s *story.Story) []*sim.Machine {
	return append(append([]*sim.Machine{}, s.Pre...), s.Booted...)
}

func fmtMap[K comparable, V any](m map[K]V) string { return fmt.Sprint(m) }

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
