package service_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
	"github.com/anvil-fleet/anvil/sim"
)

// BenchmarkRollout1000 rolls out 1,000 simulated machines whose reboot
// takes no time, with maxUnavailable 10%, against the real kube-apiserver
// and the real services. It reports the rollout's wall time and the
// orchestration overhead per machine, and, as a baseline measured in the
// same run, the time the bare external work takes with the same
// parallelism: per machine a cordon and an uncordon patch on the real API
// server and one raw JetStream publish per event the rollout appends.
//
//	go test ./services/rollout/service -run '^$' -bench Rollout1000 -benchtime 1x -timeout 30m
func BenchmarkRollout1000(b *testing.B) {
	const n = 1000
	s := newStack(b)
	org, pool := "bench", "bench"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, func(c *sim.Config) {
		c.MaxWait = 2 * time.Second
		c.AgentIntervals = sim.TestIntervals()
		c.AgentIntervals.Heartbeat = 10 * time.Second
		c.AgentIntervals.Report = time.Minute
		c.AgentIntervals.PollWait = 20 * time.Second
	})
	setup := time.Now()
	s.machines(org, pool, fleet, n)
	strat := steady("10%")
	s.createPool(org, pool, "c1", poolSpec("1", strat))
	b.Logf("setup: %d machines booted and provisioned in %s", n, time.Since(setup).Round(time.Second))

	for i := 0; i < b.N; i++ {
		start := time.Now()
		rev := s.apply(org, pool, poolSpec(fmt.Sprint(i+2), strat))
		stop := s.progress(org, pool, uint64(rev))
		r := s.waitRollout(org, pool, uint64(rev), 8*time.Minute, rollout.StatusSucceeded)
		total := time.Since(start)
		stop()
		if r.Progress.Done != n {
			b.Fatalf("progress %+v", r.Progress)
		}
		appended := r.Version // an upper bound of the events appended; counted exactly below
		events := s.countEvents(org, r.ID)
		base := s.baseline(b, pool, n, events/n)
		b.ReportMetric(total.Seconds(), "s/rollout")
		b.ReportMetric(float64(total.Milliseconds())/n, "ms/machine")
		b.ReportMetric(base.Seconds(), "baseline-s")
		b.ReportMetric(total.Seconds()/base.Seconds(), "x-baseline")
		b.Logf("rollout of %d machines: %s (%.1f ms per machine, %d events, version %d); baseline of the bare work: %s",
			n, total.Round(time.Millisecond), float64(total.Milliseconds())/n, events, appended, base.Round(time.Millisecond))
	}
}

// countEvents counts the events on a rollout's subject.
func (s *stack) countEvents(org, id string) int {
	n := 0
	err := s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "rollout", AggregateID: id},
		events.Position{}, events.Position{}, func(*events.Envelope) error { n++; return nil })
	must(s.t, err)
	return n
}

// baseline does the bare external work of a rollout with the same
// parallelism (maxUnavailable machines at a time): a cordon and an
// uncordon patch per node, and perMachine raw JetStream publishes.
func (s *stack) baseline(b *testing.B, pool string, n, perMachine int) time.Duration {
	js, err := jetstream.New(s.nc)
	must(b, err)
	ctx := context.Background()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}, Storage: jetstream.FileStorage})
	must(b, err)
	sem := make(chan struct{}, max(n/10, 1))
	var wg sync.WaitGroup
	start := time.Now()
	for i := 1; i <= n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			node := fmt.Sprintf("%s-m%02d", pool, i)
			for _, p := range []string{`{"spec":{"unschedulable":true}}`, `{"spec":{"unschedulable":null}}`} {
				if _, err := s.cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
			for j := 0; j < perMachine; j++ {
				if _, err := js.Publish(ctx, fmt.Sprintf("baseline.%d", i), []byte(`{"machine":"x","step":"cordon","attempt":1}`)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// progress prints the rollout's progress to stderr every 5 s until stop
// is called: a benchmark's own log shows only at its end.
func (s *stack) progress(org, pool string, revision uint64) (stop func()) {
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if r, ok := s.findRollout(org, pool, revision); ok {
					fmt.Fprintf(os.Stderr, "%6.1fs %s %s: %s (in progress %d, failed %d)\n", time.Since(start).Seconds(), r.ID, r.Status, r.Progress, r.Progress.InProgress, r.Progress.Failed)
				}
			}
		}
	}()
	return func() { close(done) }
}
