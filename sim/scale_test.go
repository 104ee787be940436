package sim_test

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/sim"
)

// TestScale runs ANVIL_SIM_SCALE machines (e.g. 1000) through boot, assign,
// and one reboot each, against the real stack and kube-apiserver, and logs
// how long each phase took. It is skipped unless the variable is set: it
// is a measurement, not part of `make test`.
func TestScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ANVIL_SIM_SCALE"))
	if n <= 0 {
		t.Skip("set ANVIL_SIM_SCALE=<machines> to run")
	}
	s := startStack(t)
	s.patience = 15 * time.Minute
	fleet, err := sim.New(sim.Config{
		BootURL: s.bootURL, EnrollmentToken: s.enroll, Kube: s.cp.Client,
		RebootTime: time.Second, RebootJitter: 500 * time.Millisecond, MaxWait: time.Second,
		AgentIntervals: sim.AgentIntervals{Heartbeat: 10 * time.Second, PollWait: 30 * time.Second},
		Logger:         slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ms := fleet.AddN(n, "5ca1e")
	start := time.Now()
	phase := start
	lap := func(what string) {
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		t.Logf("%-40s %8s (heap %d MiB, goroutines %d)", what, time.Since(phase).Round(time.Millisecond), mem.HeapAlloc>>20, runtime.NumGoroutine())
		phase = time.Now()
	}
	if err := fleet.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	all := func(what string, ok func(*sim.Machine) bool) {
		t.Helper()
		s.eventually(what, func() (bool, string) {
			bad := 0
			for _, m := range ms {
				if !ok(m) {
					bad++
				}
			}
			return bad == 0, fmt.Sprintf("%d of %d not there; phases %v", bad, n, fleet.Counts())
		})
	}
	all("all registered and waiting", func(m *sim.Machine) bool { return m.Phase() == sim.PhaseWaiting })
	lap("registered (waiting)")

	parallel(t, ms, 16, func(m *sim.Machine) error {
		if err := s.tryCommand(m.UUID(), regapi.AssignToPool{Pool: pool}); err != nil {
			return err
		}
		return s.tryCommand(m.UUID(), regapi.SetTargetRevision{Revision: 1})
	})
	lap("assigned")
	all("all running", func(m *sim.Machine) bool { return m.Phase() == sim.PhaseRunning })
	lap("booted (running)")
	s.eventually("all nodes Ready", func() (bool, string) {
		l, err := s.cp.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range l.Items {
			if kubeharness.NodeIsReady(&l.Items[i]) {
				ready++
			}
		}
		return ready >= n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	lap("nodes Ready")

	rev2 := s.newRevision("4230.2.4")
	parallel(t, ms, 16, func(m *sim.Machine) error {
		if err := s.tryCommand(m.UUID(), regapi.SetTargetRevision{Revision: rev2}); err != nil {
			return err
		}
		return s.tryRequestReboot("scale", bootapi.RebootRequested{Org: org, UUID: m.UUID(), InstructionID: "i-" + m.UUID()[24:],
			Kind: bootapi.KindReboot, Pool: pool, Revision: rev2})
	})
	lap("reboots requested")
	all("all rebooted once and running", func(m *sim.Machine) bool {
		return len(m.Reboots()) == 1 && m.Phase() == sim.PhaseRunning
	})
	lap("rebooted (running)")
	for _, m := range ms {
		if r := m.Reboots(); len(r) != 1 {
			t.Errorf("%s rebooted %d times", m.UUID(), len(r))
		}
	}
	t.Logf("total %s for %d machines", time.Since(start).Round(time.Millisecond), n)
}

// parallel runs fn for every machine on a few workers and fails the test
// if any call failed.
func parallel(t *testing.T, ms []*sim.Machine, workers int, fn func(*sim.Machine) error) {
	t.Helper()
	ch := make(chan *sim.Machine)
	errs := make(chan error, len(ms))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for m := range ch {
				if err := fn(m); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, m := range ms {
		ch <- m
	}
	close(ch)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
