package service_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/sim"
)

// crashes: the rollout service is killed at 20 random moments of a
// 30-machine rollout and started again each time. The rollout completes,
// never more than maxUnavailable nodes were unschedulable, and no machine
// was told to reboot twice for the same step.
func crashes(s *stack) {
	org, pool := "crash", "crash"
	tok := s.org(org)
	s.cluster(org, "c1")
	// A reboot takes a while, so that the kills land in every step.
	fleet := s.fleetFor(tok, func(c *sim.Config) { c.RebootTime, c.RebootJitter = 1500*time.Millisecond, 500*time.Millisecond })
	ms := s.machines(org, pool, fleet, 30)
	s.createPool(org, pool, "c1", poolSpec("1", steady("3")))
	watch := s.watchNodes(pool + "-")
	rev := s.apply(org, pool, poolSpec("2", steady("3")))

	// The seed fixes when the kills land, not how the services interleave.
	rng := rand.New(rand.NewPCG(7, eventstest.Seed(s.t, uint64(time.Now().UnixNano()))))
	kills := 0
	for kills < 20 {
		time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond)
		if r, ok := s.findRollout(org, pool, uint64(rev)); ok && r.Status.Final() {
			break
		}
		s.killRollout()
		kills++
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // down for a while
		}
		s.startRollout()
	}
	r := s.waitRollout(org, pool, uint64(rev), 5*time.Minute, api.StatusSucceeded)
	s.t.Logf("killed the rollout service %d times; the rollout took %s", kills, r.FinishedAt.Sub(r.StartedAt))
	if kills < 20 {
		s.t.Fatalf("the rollout finished after only %d kills; make it longer", kills)
	}
	if r.Progress.Done != 30 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	if got := watch.maxCordoned(); got > 3 {
		s.t.Fatalf("%d nodes were unschedulable at once; maxUnavailable is 3", got)
	}
	if c := s.cordoned(pool + "-"); len(c) > 0 {
		s.t.Fatalf("left cordoned: %v", c)
	}
	lines := s.log(org, r.ID)
	for _, m := range ms {
		if n := len(m.Reboots()); n != 1 {
			s.t.Fatalf("%s rebooted %d times, want exactly once", m.Hostname(), n)
		}
		starts := 0
		for _, l := range lines {
			if strings.Contains(l, " "+m.Hostname()+" reboot started") {
				starts++
			}
		}
		if starts != 1 {
			s.t.Fatalf("%s: %d reboot steps started, want 1", m.Hostname(), starts)
		}
	}
	instr, err := s.instructionsOf(org, r.ID)
	must(s.t, err)
	for uuid, n := range instr {
		if n != 1 {
			s.t.Fatalf("machine %s got %d reboot instructions in the log, want 1", uuid, n)
		}
	}
}

// twoReplicas: two replicas of the rollout service share the work; a
// rollout is driven by exactly one of them at any moment (its lease), and
// when that one stops, the other takes the rollout over and finishes it.
func twoReplicas(s *stack) {
	org, pool := "pair", "pair"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, func(c *sim.Config) { c.RebootTime = time.Second })
	s.machines(org, pool, fleet, 6)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))
	other, stopOther := s.startReplica("test-2")
	first := s.current()

	rev := s.apply(org, pool, poolSpec("2", steady("1")))
	var id string
	s.eventually("the rollout is driven", time.Minute, func() (bool, string) {
		r, ok := s.findRollout(org, pool, uint64(rev))
		id = r.ID
		return ok && len(first.App.Driving())+len(other.App.Driving()) > 0, ""
	})
	key := org + "/" + id
	drivers := func() (a, b bool) {
		return slices.Contains(first.App.Driving(), key), slices.Contains(other.App.Driving(), key)
	}
	// Sample while it runs: never both.
	var holder string
	for i := 0; i < 20; i++ {
		a, b := drivers()
		if a && b {
			s.t.Fatalf("both replicas drive rollout %s", id)
		}
		if a {
			holder = "first"
		} else if b {
			holder = "second"
		}
		time.Sleep(100 * time.Millisecond)
	}
	if holder == "" {
		s.t.Fatal("no replica drives the rollout")
	}
	// Stop the holder; the other takes over.
	if holder == "first" {
		s.killRollout()
	} else {
		stopOther()
	}
	r := s.waitRollout(org, pool, uint64(rev), 3*time.Minute, api.StatusSucceeded)
	if r.Progress.Done != 6 {
		s.t.Fatalf("progress %+v", r.Progress)
	}
	for _, m := range fleet.Machines() {
		if n := len(m.Reboots()); n != 1 {
			s.t.Fatalf("%s rebooted %d times across the handover, want once", m.Hostname(), n)
		}
	}
	s.t.Logf("replica %s drove rollout %s until it stopped; the other finished it", holder, id)
	if holder == "first" {
		s.startRollout() // the remaining scenarios use the stack's own replica
	}
	stopOther()
}
