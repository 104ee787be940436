package sim_test

import (
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/sim"
)

// eventLog keeps the fleet's events for assertions.
type eventLog struct {
	mu     sync.Mutex
	events []sim.Event
}

func (l *eventLog) add(e sim.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) count(uuid string, kind sim.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.UUID == uuid && e.Kind == kind {
			n++
		}
	}
	return n
}

var machineRevision = regexp.MustCompile(`^mr-[0-9a-f]+$`)

// TestFleetAgainstTheRealStack boots simulated machines against devstack
// (embedded JetStream and all five services) and a real kube-apiserver
// with kwok: waiting without a pool, booting once assigned, one reboot per
// instruction with the node NotReady meanwhile, a hung reboot, and a
// machine that never joins.
func TestFleetAgainstTheRealStack(t *testing.T) {
	s := startStack(t)
	events := &eventLog{}
	fleet, err := sim.New(sim.Config{
		BootURL: s.bootURL, EnrollmentToken: s.enroll, Kube: s.cp.Client,
		RebootTime: 300 * time.Millisecond, RebootJitter: 100 * time.Millisecond, Seed: 1,
		MaxWait: 200 * time.Millisecond, AgentIntervals: sim.TestIntervals(),
		Logger:      slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "sim"),
		AgentLogger: slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "agent"),
		OnEvent:     events.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	machines := fleet.AddN(2, "5a5a")
	m, lonely := machines[0], machines[1]
	uuid := m.UUID()
	if uuid != "5a5a0000-0000-0000-0000-000000000001" {
		t.Fatalf("AddN UUID %s", uuid)
	}
	lonely.NeverJoin(true)
	if err := fleet.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)

	// Without a pool the machine registers and waits, asking again and again.
	s.eventually("machine registered and waiting", func() (bool, string) {
		st := m.Status()
		reg, err := s.machine(uuid)
		return st.Phase == sim.PhaseWaiting && st.IPXERequests >= 3 && err == nil && reg.Status == regapi.StatusReadyUnassigned,
			mustJSON(st) + " " + mustJSON(reg) + errString(err)
	})
	if m.Boots() != 0 || m.BootedRevision() != "" {
		t.Fatalf("booted without a pool: %+v", m.Status())
	}
	if c := fleet.Counts(); c[sim.PhaseWaiting] != 2 {
		t.Errorf("counts %v, want both machines waiting", c)
	}

	// Assigned, with a target revision: it boots, its agent reports the
	// revision, and its node joins with the labels from Ignition.
	for _, x := range machines {
		s.command(x.UUID(), regapi.AssignToPool{Pool: pool})
		s.command(x.UUID(), regapi.SetTargetRevision{Revision: 1})
	}
	s.eventually("revision 1 booted and reported", func() (bool, string) {
		st := m.Status()
		reg, err := s.machine(uuid)
		return st.Phase == sim.PhaseRunning && machineRevision.MatchString(st.BootedRevision) && err == nil &&
			reg.CurrentRevision == 1 && reg.Hardware != nil && reg.Hardware.CPUs == 4, mustJSON(st) + " " + mustJSON(reg) + errString(err)
	})
	host := m.Hostname()
	if host != uuid { // no hostname in the registry: the renderer uses the UUID
		t.Errorf("hostname %q", host)
	}
	s.eventually("node Ready with the pool's labels", func() (bool, string) {
		n, err := s.node(host)
		return err == nil && kubeharness.NodeIsReady(n) && n.Labels["anvil.dev/rack"] == "r12" &&
			n.Labels["kubernetes.io/hostname"] == host, nodeLabelsString(n) + errString(err)
	})
	rev1 := m.BootedRevision()
	var rev2 uint64

	t.Run("reboot instruction", func(t *testing.T) {
		watch := s.watchReady(host)
		rev2 = s.newRevision("4230.2.4")
		s.command(uuid, regapi.SetTargetRevision{Revision: rev2})
		s.requestReboot("r-1", bootapi.RebootRequested{Org: org, UUID: uuid, InstructionID: "i-1", Kind: bootapi.KindReboot,
			Pool: pool, Revision: rev2, Reason: "sim test"})
		s.eventually("instruction i-1 done", func() (bool, string) {
			in, err := s.instruction(uuid, "i-1")
			return err == nil && in.Status == bootapi.StatusDone, mustJSON(in) + errString(err)
		})
		s.eventually("revision 2 booted and reported, node Ready", func() (bool, string) {
			st := m.Status()
			reg, err := s.machine(uuid)
			n, nerr := s.node(host)
			return st.Phase == sim.PhaseRunning && st.BootedRevision != rev1 && machineRevision.MatchString(st.BootedRevision) &&
					err == nil && reg.CurrentRevision == rev2 && nerr == nil && kubeharness.NodeIsReady(n),
				mustJSON(st) + " " + mustJSON(reg) + errString(err) + " " + nodeLabelsString(n)
		})
		// The watch saw every update; wait for it to have caught up. As a
		// kubelet whose machine reboots within its lease: NotReady for
		// the reboot, Ready again, and kwok (the lease) kept it meanwhile.
		s.eventually("the node seen NotReady during the reboot", watch.sawNotReady(sim.RebootingReason))
		if watch.sawKwokLetGo() {
			t.Errorf("kwok let go of the node during an ordinary reboot")
		}
		rb := m.Reboots()
		if len(rb) != 1 || rb[0].InstructionID != "i-1" || rb[0].From != rev1 || rb[0].Kind != "reboot" {
			t.Errorf("reboots %+v, want one for i-1 from %s", rb, rev1)
		}
		if m.Boots() != 2 {
			t.Errorf("boots %d, want 2", m.Boots())
		}
		if n := events.count(uuid, sim.EventNodeNotReady); n != 1 {
			t.Errorf("%d node_not_ready events, want 1", n)
		}
	})

	t.Run("hung reboot", func(t *testing.T) {
		watch := s.watchReady(host)
		m.Hang(true)
		s.requestReboot("r-2", bootapi.RebootRequested{Org: org, UUID: uuid, InstructionID: "i-2", Kind: bootapi.KindReapply,
			Pool: pool, Revision: rev2, Reason: "sim test: reapply"})
		s.eventually("machine hung, node NotReady", func() (bool, string) {
			st := m.Status()
			n, err := s.node(host)
			return st.Phase == sim.PhaseHung && err == nil && !kubeharness.NodeIsReady(n), mustJSON(st) + " " + nodeLabelsString(n)
		})
		if in, err := s.instruction(uuid, "i-2"); err != nil || in.Status != bootapi.StatusAccepted {
			t.Errorf("while hung: %s %v", mustJSON(in), err)
		}
		// A machine that does not come back loses its lease: kwok lets go.
		s.eventually("the hung machine's node NotReady without kwok", func() (bool, string) {
			ok, seen := watch.sawNotReady("KubeletNotReady")()
			return ok && watch.sawKwokLetGo(), seen
		})
		m.Hang(false)
		s.eventually("instruction i-2 done, node Ready", func() (bool, string) {
			in, err := s.instruction(uuid, "i-2")
			n, nerr := s.node(host)
			return err == nil && in.Status == bootapi.StatusDone && m.Phase() == sim.PhaseRunning && nerr == nil && kubeharness.NodeIsReady(n),
				mustJSON(in) + errString(err) + " " + nodeLabelsString(n)
		})
		rb := m.Reboots()
		if len(rb) != 2 || rb[1].InstructionID != "i-2" {
			t.Errorf("reboots %+v, want i-1 then i-2", rb)
		}
	})

	t.Run("never joins", func(t *testing.T) {
		lhost := ""
		s.eventually("booted, node present but not Ready", func() (bool, string) {
			st := lonely.Status()
			if st.Phase != sim.PhaseRunning || st.Hostname == "" {
				return false, mustJSON(st)
			}
			lhost = st.Hostname
			n, err := s.node(lhost)
			return err == nil && !kubeharness.NodeIsReady(n) && n.Labels[sim.DefaultKwokLabel] == "", nodeLabelsString(n) + errString(err)
		})
		s.eventually("agent reports revision 1", func() (bool, string) {
			reg, err := s.machine(lonely.UUID())
			return err == nil && reg.CurrentRevision == 1, mustJSON(reg) + errString(err)
		})
		lonely.NeverJoin(false)
		s.eventually("node joins", func() (bool, string) {
			n, err := s.node(lhost)
			return err == nil && kubeharness.NodeIsReady(n), nodeLabelsString(n) + errString(err)
		})
	})

	// No instruction caused two reboots.
	seen := map[string]int{}
	for _, x := range fleet.Machines() {
		for _, r := range x.Reboots() {
			if seen[r.InstructionID]++; seen[r.InstructionID] > 1 {
				t.Errorf("instruction %s rebooted twice", r.InstructionID)
			}
		}
	}
	if got := fleet.TotalReboots(); got != 2 {
		t.Errorf("fleet rebooted %d times, want 2", got)
	}
	if !strings.Contains(strings.Join(m.Status().Console, "\n"), "Ignition: applied revision") {
		t.Errorf("console: %v", m.Status().Console)
	}
}

func TestDefaultKwokLabelMatchesTheHarness(t *testing.T) {
	if sim.DefaultKwokLabel != kubeharness.KwokManagedLabel {
		t.Fatalf("sim.DefaultKwokLabel %q, kubeharness.KwokManagedLabel %q", sim.DefaultKwokLabel, kubeharness.KwokManagedLabel)
	}
	if sim.RebootingReason != kubeharness.RebootingReason {
		t.Fatalf("sim.RebootingReason %q, kubeharness.RebootingReason %q", sim.RebootingReason, kubeharness.RebootingReason)
	}
}
