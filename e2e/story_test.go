package e2e_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/demo/story"
)

// TestEndToEnd runs everything on one control plane and one stack (a
// control plane start costs seconds): the seed story, then the fault cases
// side by side in their own organizations, the whole-stack restart, and
// the audit by replay over everything that happened.
func TestEndToEnd(t *testing.T) {
	env, _ := startEnv(t)
	var main *story.Story
	t.Run("story", func(t *testing.T) { main = seedStory(t, env) })
	t.Run("faults", func(t *testing.T) {
		t.Run("a reboot that hangs, then retry", func(t *testing.T) { t.Parallel(); hangThenRetry(t, env) })
		t.Run("a machine that never joins", func(t *testing.T) { t.Parallel(); neverJoins(t, env) })
		t.Run("maintenance and graceful delete", func(t *testing.T) { t.Parallel(); maintenanceAndDelete(t, env) })
	})
	t.Run("whole-stack restart mid-rollout", func(t *testing.T) { stackRestart(t, env) })
	t.Run("audit by replay", func(t *testing.T) { auditByReplay(t, env) })
	_ = main
}

// seedStory is `make demo`'s story, each step asserted.
func seedStory(t *testing.T, env *story.Env) *story.Story {
	ctx := ctxT(t, 4*time.Minute)
	s := story.New(env, story.Options{MaxUnavailable: "5", StateDir: t.TempDir()})
	s.Opts.Sim = nil

	// 2. organization, cluster, pool
	must(t, s.CreateOrg(ctx))
	must(t, s.CreateCluster(ctx))
	pc, err := s.CreatePool(ctx)
	must(t, err)
	if pc.RevisionCreated != 1 || pc.Pool.KubernetesVersion != "1.36.4" || pc.ApplyRequested != 0 {
		t.Fatalf("pool created: %+v", pc)
	}

	// 3. five pre-registered, twenty self-registered
	must(t, s.StartFleet(ctx))
	t.Cleanup(s.Fleet.Stop)
	must(t, s.PreRegister(ctx))
	s.Boot(ctx)
	must(t, s.WaitRegistered(ctx, nil))

	// 4. assign, provision, workloads
	must(t, s.Assign(ctx))
	ro, err := s.ApplyRevision(ctx, 1)
	must(t, err)
	final, err := s.Watch(ctx, ro.ID, nil, nil)
	must(t, err)
	r, err := s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if final != "succeeded" || r.Status != "succeeded" || r.Progress.Done != 25 || r.Progress.Total != 25 {
		t.Fatalf("provisioning: stream said %q; %s %+v %s", final, r.Status, r.Progress, r.Reason)
	}
	registryAll(t, s, "ready", 1)
	ready, cordoned, total, err := s.NodesReady(ctx)
	if err != nil || ready != 25 || total != 25 || cordoned != 0 {
		t.Fatalf("nodes: %d Ready of %d, %d cordoned, %v", ready, total, cordoned, err)
	}
	must(t, s.Workloads(ctx))

	// 5–6. Kubernetes 1.36 → 1.37 with Save & Apply, traced, watched live
	watch := watchCordons(t, env, s.Opts.Pool+"-")
	before := reboots(all(s))
	tracer := provider.Tracer("e2e")
	tctx, root := tracer.Start(context.Background(), "e2e save & apply")
	rev, ro, err := s.ChangeVersion(ctx, "1.37", traced(tctx)...)
	root.End()
	must(t, err)
	if rev != 2 {
		t.Fatalf("save & apply made revision %d, want 2", rev)
	}
	var live []client.LogEntry
	var mu sync.Mutex
	final, err = s.Watch(ctx, ro.ID, func(e client.LogEntry) { mu.Lock(); live = append(live, e); mu.Unlock() }, nil)
	must(t, err)
	r, err = s.WaitRolloutStatus(ctx, ro.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if final != "succeeded" || r.Status != "succeeded" || r.Progress.Done != 25 || r.Rollback {
		t.Fatalf("upgrade: stream said %q; %s %+v %s", final, r.Status, r.Progress, r.Reason)
	}
	if got := watch.max(); got > 5 || got == 0 {
		t.Fatalf("%d nodes were unschedulable at once; maxUnavailable is 5", got)
	}
	after := reboots(all(s))
	for u, n := range after {
		if n-before[u] != 1 {
			t.Fatalf("machine %s rebooted %d times in the upgrade, want once", u, n-before[u])
		}
	}
	registryAll(t, s, "ready", 2)

	// 7. the operation log: the stream saw what the page says, and every
	// machine went through its steps in order
	log, err := s.Log(ctx, ro.ID)
	must(t, err)
	if len(live) != len(log) {
		t.Fatalf("the live stream had %d entries, the log %d", len(live), len(log))
	}
	want := []string{"begun", "cordon started", "cordon succeeded", "drain started", "drain succeeded",
		"reboot started", "reboot succeeded", "wait_boot started", "wait_boot succeeded",
		"wait_ready started", "wait_ready succeeded", "uncordon started", "uncordon succeeded", "done"}
	steps := map[string][]string{}
	for _, e := range log {
		if e.Node == "" || e.Outcome == "blocked" {
			continue
		}
		w := e.Outcome
		if e.Step != "" {
			w = e.Step + " " + e.Outcome
		}
		steps[e.Node] = append(steps[e.Node], w)
	}
	if len(steps) != 25 {
		t.Fatalf("the log names %d machines, want 25", len(steps))
	}
	for node, got := range steps {
		if !slices.Equal(got, want) {
			t.Fatalf("%s: steps %v, want %v", node, got, want)
		}
	}
	if l := log[len(log)-1]; l.Outcome != "succeeded" || !strings.Contains(l.Message, "25 machines at revision 2") {
		t.Fatalf("last log entry: %s", l.String())
	}

	// tracing: the Save & Apply request's trace reaches every service
	checkTrace(t, root.SpanContext().TraceID(), ro.ID)

	// 7. roll back
	before = reboots(all(s))
	rb, err := s.ApplyRevision(ctx, 1)
	must(t, err)
	final, err = s.Watch(ctx, rb.ID, nil, nil)
	must(t, err)
	r, err = s.WaitRolloutStatus(ctx, rb.ID, "succeeded", "failed", "aborted")
	must(t, err)
	if final != "succeeded" || r.Status != "succeeded" || !r.Rollback || r.Progress.Done != 25 {
		t.Fatalf("rollback: %q %s rollback=%t %+v", final, r.Status, r.Rollback, r.Progress)
	}
	for u, n := range reboots(all(s)) {
		if n-before[u] != 1 {
			t.Fatalf("machine %s rebooted %d times in the rollback", u, n-before[u])
		}
	}
	registryAll(t, s, "ready", 1)
	if got := watch.max(); got > 5 {
		t.Fatalf("%d nodes unschedulable at once", got)
	}

	// the audit events
	evs, err := s.Events(ctx, client.EventFilter{})
	must(t, err)
	count := map[string]int{}
	admin := 0
	for _, e := range evs {
		count[e.Type]++
		if strings.HasPrefix(e.Type, "pool.") && strings.Contains(e.Actor, "(demo-admin)") {
			admin++
		}
	}
	for typ, n := range map[string]int{"org.created": 1, "cluster.created": 1, "pool.created": 1, "pool.revision_created": 2,
		"pool.apply_requested": 3, "rollout.started": 3, "rollout.succeeded": 3, "machine.preregistered": 5,
		"rollout.machine_done": 75, "rollout.reboot_requested": 75 /* the provisioning too */} {
		if count[typ] != n {
			t.Errorf("%d %s events, want %d (all: %s)", count[typ], typ, n, fmtMap(count))
		}
	}
	if admin < 6 {
		t.Errorf("only %d pool events name the admin token as their actor", admin)
	}
	ev, err := s.Events(ctx, client.EventFilter{Aggregate: "pool/" + s.Opts.Pool, Types: []string{"pool.apply_requested"}})
	if err != nil || len(ev) != 3 {
		t.Fatalf("filtered events: %d %v", len(ev), err)
	}
	return s
}

// registryAll waits until every machine of the story's pool has status at
// revision in the registry.
func registryAll(t *testing.T, s *story.Story, status string, revision uint64) {
	t.Helper()
	eventually(t, "every machine "+status+" at revision", time.Minute, func() (bool, string) {
		ms, err := s.Machines(context.Background(), s.Opts.Pool)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if string(m.Status) != status || m.CurrentRevision != revision {
				return false, m.Hostname + " " + string(m.Status)
			}
		}
		return len(ms) > 0, ""
	})
}

// cordonWatch records the most nodes with a prefix unschedulable at once.
type cordonWatch struct {
	mu      sync.Mutex
	cordons map[string]bool
	most    int
}

func (w *cordonWatch) max() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}

func watchCordons(t *testing.T, env *story.Env, prefix string) *cordonWatch {
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := env.Kube.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	must(t, err)
	w := &cordonWatch{cordons: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || !strings.HasPrefix(n.Name, prefix) {
				continue
			}
			w.mu.Lock()
			w.cordons[n.Name] = n.Spec.Unschedulable
			c := 0
			for _, v := range w.cordons {
				if v {
					c++
				}
			}
			w.most = max(w.most, c)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// traced is the trace context of ctx as request headers (a traceparent).
func traced(ctx context.Context) []client.CallOption {
	carrier := propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	var opts []client.CallOption
	for _, k := range carrier.Keys() {
		opts = append(opts, client.Header(k, carrier.Get(k)))
	}
	return opts
}

var _ = trace.TraceID{}
