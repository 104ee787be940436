package faults_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// TestFaults runs the three faults one after the other on one system (a
// NATS cluster, the services, a control plane and 50 machines), each
// during its own rollout of the whole pool. Every fault leaves the system
// healthy again, which the next one relies on.
func TestFaults(t *testing.T) {
	s := newStack(t)
	s.provision()
	figures := map[string]string{}
	run := func(name string, fn func(*stack, map[string]string)) {
		t.Run(name, func(t *testing.T) {
			defer s.use(t)()
			before := s.c.crashes()
			fn(s, figures)
			// The services must ride the fault out; Docker starting
			// one again after it exited on an error does not count.
			for name, n := range s.c.crashes() {
				if n > before[name] {
					s.c.mu.Lock()
					id := s.c.svcs[name].Container.ID
					s.c.mu.Unlock()
					t.Errorf("%s exited on an error %d time(s) during the fault and was started again by Docker:\n%s", name, n-before[name], s.c.logs(id, 20))
				}
			}
		})
	}
	run("StreamLeaderStopped", leaderStopped)
	run("NodePartitioned", nodePartitioned)
	run("ServicesRestarted", servicesRestarted)
	for _, k := range []string{"leader stop", "partition", "restart"} {
		if v, ok := figures[k]; ok {
			t.Logf("%s: %s", k, v)
		}
	}
}

// use points the stack's helpers at a subtest's t, and returns what puts
// the parent's back.
func (s *stack) use(t *testing.T) func() {
	prev := s.t
	s.t, s.c.t = t, t
	return func() { s.t, s.c.t = prev, prev }
}

// currentLeader waits until the stream has a leader and every replica is
// current, and returns the leader.
func (s *stack) currentLeader() string {
	s.t.Helper()
	var leader string
	s.eventually("stream leader with every replica current", 2*time.Minute, func() (bool, string) {
		l, current, err := s.streamLeader()
		leader = l
		if err != nil {
			return false, err.Error()
		}
		return l != "" && current, fmt.Sprintf("leader %q, replicas current %v", l, current)
	})
	return leader
}

// firstAppendAfter waits for the probe's first acknowledged append begun
// at or after t0.
func (s *stack) firstAppendAfter(p *probe, t0 time.Time) probeAck {
	s.t.Helper()
	s.eventually("an append succeeds", 2*time.Minute, func() (bool, string) {
		_, ok := p.firstAckAfter(t0)
		_, errs := p.snapshot()
		return ok, fmt.Sprintf("%d failed attempts so far", errs)
	})
	a, _ := p.firstAckAfter(t0)
	return a
}

// firstServiceAppend is when the server stored the first event of a
// service (not the probe's) after t0.
func firstServiceAppend(msgs []storedMsg, t0 time.Time) (time.Time, string) {
	for _, m := range msgs {
		if m.at.After(t0) && !strings.Contains(m.subject, ".probe.") {
			return m.at, m.typ
		}
	}
	return time.Time{}, ""
}

// checkInstructions checks that the rollout asked each machine to reboot
// with exactly one instruction id.
func (s *stack) checkInstructions(msgs []storedMsg, rolloutID string) {
	s.t.Helper()
	per := map[string]map[string]bool{}
	for _, m := range msgs {
		if m.typ != bootapi.EventTypeRebootRequested || !strings.HasSuffix(m.subject, ".rollout."+rolloutID) {
			continue
		}
		var rr bootapi.RebootRequested // the body is the payload
		if err := json.Unmarshal(m.data, &rr); err != nil {
			s.t.Fatalf("seq %d: %v", m.seq, err)
		}
		if per[rr.UUID] == nil {
			per[rr.UUID] = map[string]bool{}
		}
		per[rr.UUID][rr.InstructionID] = true
	}
	if len(per) != fleetSize {
		s.t.Errorf("rollout %s asked %d machines to reboot, want %d", rolloutID, len(per), fleetSize)
	}
	for u, set := range per {
		if len(set) != 1 {
			s.t.Errorf("machine %s got %d reboot instructions from rollout %s, want 1", u, len(set), rolloutID)
		}
	}
}

// leaderStopped: the stream leader's container is stopped (SIGTERM, as
// docker stop) while 50 machines roll, kept down while the rollout goes on,
// and started again.
func leaderStopped(s *stack, figures map[string]string) {
	before := s.reboots()
	p := s.startProbe("leader")
	rev := s.apply()
	s.waitProgress(rev, 10)
	leader := s.currentLeader()
	pre := s.readStreamRetry()
	s.t.Logf("stopping %s, the stream leader; clients per node: %v", leader, s.clientNames())
	n := s.c.node(leader)
	// ANVIL_FAULTS_KILL_LEADER=1 kills the node (SIGKILL) instead.
	kill := os.Getenv("ANVIL_FAULTS_KILL_LEADER") != ""
	how := "stopped (SIGTERM)"
	if kill {
		how = "killed (SIGKILL)"
	}
	stopAt := time.Now()
	s.c.stopNode(n, kill)
	exitedAt := time.Now()
	first := s.firstAppendAfter(p, stopAt)
	// An append begun before the process was gone may still have been
	// served by it: the recovery is counted from the exit as well.
	firstAfterExit := s.firstAppendAfter(p, exitedAt)
	newLeader := s.currentLeaderLoose()
	s.t.Logf("%s exited %.1fs after the stop; the first append begun after the stop was acknowledged %.1fs after it, the first begun after the exit %.1fs after the stop (leader now %s)",
		leader, exitedAt.Sub(stopAt).Seconds(), first.acked.Sub(stopAt).Seconds(), firstAfterExit.acked.Sub(stopAt).Seconds(), newLeader)

	// The rollout goes on with two nodes; then the node comes back.
	at, err := s.findRollout(rev)
	if err != nil {
		s.t.Fatal(err)
	}
	s.eventually("the rollout moves on while the node is down", 2*time.Minute, func() (bool, string) {
		r, err := s.findRollout(rev)
		if err != nil {
			return false, err.Error()
		}
		return r.Progress.Done >= at.Progress.Done+5 || r.Status.Final(), fmt.Sprintf("%s (%s)", r.Status, r.Progress)
	})
	down := time.Since(stopAt)
	s.c.startNode(n)
	startAt := time.Now()
	s.currentLeader()
	s.t.Logf("%s was down %.1fs; back and current %.1fs after its start", leader, down.Seconds(), time.Since(startAt).Seconds())

	r := s.waitRollout(rev, 4*time.Minute)
	p.halt()
	s.c.waitServicesReady(time.Minute)
	conns := s.clientNames()
	s.t.Logf("after: clients per node: %v", conns)
	s.checkServicesConnected(conns)
	acks, errs := p.snapshot()
	msgs := s.checkLog("after the leader's stop", ids(pre, acks))
	s.checkRollout(r, before)
	s.checkInstructions(msgs, r.ID)
	svcAt, svcType := firstServiceAppend(msgs, exitedAt)
	figures["leader stop"] = fmt.Sprintf("%s %s (exited after %.1fs); first probe append %.1fs after the stop, first begun after the exit %.1fs after the stop (%d failed attempts in all); first service event stored after the exit (%s) %.1fs after the stop; rollout %s of %d machines took %s",
		how, leader, exitedAt.Sub(stopAt).Seconds(), first.acked.Sub(stopAt).Seconds(), firstAfterExit.acked.Sub(stopAt).Seconds(), errs,
		svcType, svcAt.Sub(stopAt).Seconds(), r.ID, fleetSize,
		r.FinishedAt.Sub(r.StartedAt).Round(100*time.Millisecond))
}

// currentLeaderLoose is the leader as the cluster reports it now, without
// waiting for every replica (one is down).
func (s *stack) currentLeaderLoose() string {
	s.t.Helper()
	var leader string
	s.eventually("a stream leader", time.Minute, func() (bool, string) {
		l, _, err := s.streamLeader()
		leader = l
		return err == nil && l != "", fmt.Sprint(err)
	})
	return leader
}

// checkServicesConnected checks that each service has a connection to
// some node (the rollout service holds two: its own and client-go's is not
// NATS, so one is enough).
func (s *stack) checkServicesConnected(conns map[string][]string) {
	s.t.Helper()
	seen := map[string]bool{}
	for _, names := range conns {
		for _, n := range names {
			seen[n] = true
		}
	}
	for _, name := range serviceNames {
		if !seen[name] {
			s.t.Errorf("service %s holds no connection to any node: %v", name, conns)
		}
	}
}

// nodePartitioned: the stream leader's node is disconnected from the
// network for 30 s while 50 machines roll, then connected again at its
// address. Nothing acknowledged is lost or stored twice, the three
// replicas end identical (each hashed as it stores the stream), and the
// services' projections, built live through the partition, equal the same
// projections rebuilt from the healed log.
func nodePartitioned(s *stack, figures map[string]string) {
	before := s.reboots()
	p := s.startProbe("partition")
	rev := s.apply()
	s.waitProgress(rev, 10)
	leader := s.currentLeader()
	pre := s.readStreamRetry()
	conns := s.clientNames()
	s.t.Logf("disconnecting %s, the stream leader, for 30s; clients per node: %v", leader, conns)
	n := s.c.node(leader)
	cutAt := time.Now()
	s.c.disconnect(n)
	first := s.firstAppendAfter(p, cutAt)
	s.t.Logf("the first append begun after the cut was acknowledged %.1fs after it (leader now %s)",
		first.acked.Sub(cutAt).Seconds(), s.currentLeaderLoose())
	time.Sleep(time.Until(cutAt.Add(30 * time.Second)))
	s.c.reconnect(n)
	backAt := time.Now()
	s.currentLeader()
	s.t.Logf("%s reconnected; every replica current %.1fs later", leader, time.Since(backAt).Seconds())

	r := s.waitRollout(rev, 4*time.Minute)
	p.halt()
	s.c.waitServicesReady(time.Minute)
	after := s.clientNames()
	s.t.Logf("after: clients per node: %v", after)
	s.checkServicesConnected(after)
	acks, errs := p.snapshot()
	msgs := s.checkLog("after the partition", ids(pre, acks))
	s.checkRollout(r, before)
	s.checkInstructions(msgs, r.ID)

	// The replicas: each node's own state, then each node's copy hashed
	// while it leads.
	last := msgs[len(msgs)-1].seq
	var states map[string]string
	s.eventually("every replica holds the same stream", time.Minute, func() (bool, string) {
		var err error
		states, err = s.replicaStates()
		if err != nil {
			return false, err.Error()
		}
		return allEqual(states), fmt.Sprint(states)
	})
	hashes := s.replicaHashes(last)
	if !allEqual(hashes) {
		s.t.Errorf("the replicas differ: %v", hashes)
	}
	s.t.Logf("replicas: %v; hashes of sequences 1…%d: %v", states, last, hashes)

	// The projections: read live, then rebuilt from the log by restarting
	// the registry and the rollout service (their read models live in
	// memory and are replayed from sequence 1 at start), then read again.
	var live string
	var liveDoc []byte
	var head uint64
	s.retry("read the projections", time.Minute, func() error {
		var err error
		live, liveDoc, head, err = s.views()
		return err
	})
	s.c.restartServices("registry", "rollout")
	s.c.waitServicesReady(2 * time.Minute)
	var rebuilt string
	var head2 uint64
	s.eventually("the rebuilt projections equal the live ones", time.Minute, func() (bool, string) {
		var err error
		var rebuiltDoc []byte
		rebuilt, rebuiltDoc, head2, err = s.views()
		if err != nil {
			return false, err.Error()
		}
		if rebuilt == live && head2 == head {
			return true, ""
		}
		// What differs, live then rebuilt: the hashes alone do not say.
		return false, fmt.Sprintf("live %s at %d, rebuilt %s at %d; where they differ:\n%s", live, head, rebuilt, head2, viewsDiff(liveDoc, rebuiltDoc, 20))
	})
	s.t.Logf("projections: live %s = rebuilt %s at sequence %d", live, rebuilt, head)
	figures["partition"] = fmt.Sprintf("cut %s off for 30s; first probe append %.1fs after the cut (%d failed attempts in all); replicas %v; projections %s; rollout %s took %s",
		leader, first.acked.Sub(cutAt).Seconds(), errs, hashes, live, r.ID, r.FinishedAt.Sub(r.StartedAt).Round(100*time.Millisecond))
}

// servicesRestarted: every service container is killed and started again
// at once while 50 machines roll; the rollout resumes and completes, with
// one reboot per machine.
func servicesRestarted(s *stack, figures map[string]string) {
	before := s.reboots()
	p := s.startProbe("restart")
	rev := s.apply()
	at := s.waitProgress(rev, 15)
	pre := s.readStreamRetry()
	s.t.Logf("restarting every service at %s", at.Progress)
	restartAt := time.Now()
	s.c.restartServices(serviceNames...)
	s.c.waitServicesReady(2 * time.Minute)
	ready := time.Since(restartAt)
	r := s.waitRollout(rev, 4*time.Minute)
	p.halt()
	acks, _ := p.snapshot()
	msgs := s.checkLog("after the restart", ids(pre, acks))
	s.checkRollout(r, before)
	s.checkInstructions(msgs, r.ID)
	svcAt, svcType := firstServiceAppend(msgs, restartAt)
	figures["restart"] = fmt.Sprintf("every service ready %.1fs after the kill; first service event (%s) %.1fs after it; rollout %s took %s",
		ready.Seconds(), svcType, svcAt.Sub(restartAt).Seconds(), r.ID, r.FinishedAt.Sub(r.StartedAt).Round(100*time.Millisecond))
}
