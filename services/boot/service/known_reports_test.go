package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Machines that boot again are answered from memory; the registry hears
// of their boots afterwards, many machines in one batched report, and
// shows each machine's latest boot as last_ipxe_boot_at. The reports'
// answers keep the machines known.
func TestBootsFromMemoryReportedInBatches(t *testing.T) {
	s := newStack(t, func(o *stackOptions) {
		o.boot = func(c *service.Config) {
			c.IPXEReportInterval = 50 * time.Millisecond
			c.PrepareWorkers = -1
		}
	})
	enroll := s.org("acme")
	s.pool("acme", "workers")
	const n = 5
	ipxeURL := func(i int) string {
		return s.url + "/ipxe?uuid=" + uuidN(i) + "&mac=" + macN(i) + "&token=" + enroll
	}
	for i := range n {
		if script := s.ipxeGet(ipxeURL(i), "", ""); !strings.Contains(script, "waiting to be assigned") {
			t.Fatalf("machine %d:\n%s", i, script)
		}
		s.assign("acme", uuidN(i), "workers", 1)
		// The registry answers its boot, which is remembered.
		if script := s.ipxeGet(ipxeURL(i), "", ""); !kernelRe.MatchString(script) {
			t.Fatalf("machine %d does not boot:\n%s", i, script)
		}
	}
	batches := commandsHandled(t, regapi.SubjectReportIPXEBoots)
	hits := knownLookups(t, "hit")

	s.clock.advance(time.Minute)
	at := s.clock.now()
	for i := range n {
		if script := s.ipxeGet(ipxeURL(i), "", ""); !kernelRe.MatchString(script) {
			t.Fatalf("machine %d does not boot again:\n%s", i, script)
		}
	}
	if got := knownLookups(t, "hit") - hits; got != n {
		t.Fatalf("%v boots answered from memory, want %d", got, n)
	}
	for i := range n {
		s.eventually(fmt.Sprintf("machine %d's boot from memory in the registry", i), 10*time.Second, func() (bool, string) {
			m, err := s.machine("acme", uuidN(i))
			return err == nil && !m.LastIPXEBootAt.Before(at.Add(-time.Millisecond)), fmt.Sprintf("%v %v (want %v)", m.LastIPXEBootAt, err, at)
		})
	}
	if got := commandsHandled(t, regapi.SubjectReportIPXEBoots) - batches; got < 1 || got > n {
		t.Fatalf("%v batched reports for %d boots", got, n)
	}
	// The answers kept every machine known: their next boots are answered
	// from memory too.
	hits = knownLookups(t, "hit")
	for i := range n {
		s.ipxeGet(ipxeURL(i), "", "")
	}
	if got := knownLookups(t, "hit") - hits; got != n {
		t.Fatalf("%v boots answered from memory after the reports, want %d", got, n)
	}
}

// Machines that wait in their boot loop are remembered as waiting; each
// request of theirs is confirmed with the registry in a batch shared with
// the others' (not one SelfRegister each), which records the boot at
// once, and an assignment shows at the very next request.
func TestWaitingMachinesConfirmedInBatches(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	const n = 5
	ipxeURL := func(i, attempt int) string {
		return fmt.Sprintf("%s/ipxe?uuid=%s&mac=%s&token=%s&attempt=%d", s.url, uuidN(i), macN(i), enroll, attempt)
	}
	for i := range n {
		s.register("acme", uuidN(i), macN(i), enroll)
	}
	selfRegisters := commandsHandled(t, regapi.SubjectRegister)
	batches := commandsHandled(t, regapi.SubjectReportIPXEBoots)
	waits, misses := knownLookups(t, "wait"), knownLookups(t, "miss")

	s.clock.advance(time.Minute)
	at := s.clock.now()
	for round := range 2 {
		for i := range n {
			if script := s.ipxeGet(ipxeURL(i, 1+round), "", ""); !strings.Contains(script, "waiting to be assigned") {
				t.Fatalf("machine %d, round %d:\n%s", i, round, script)
			}
		}
	}
	if got := knownLookups(t, "wait") - waits; got != 2*n {
		t.Fatalf("%v requests confirmed as remembered waits, want %d", got, 2*n)
	}
	if got := knownLookups(t, "miss") - misses; got != 0 {
		t.Fatalf("%v requests asked the registry on their own", got)
	}
	if got := commandsHandled(t, regapi.SubjectRegister) - selfRegisters; got != 0 {
		t.Fatalf("%v SelfRegister requests for machines remembered as waiting", got)
	}
	if got := commandsHandled(t, regapi.SubjectReportIPXEBoots) - batches; got < 1 || got > 2*n {
		t.Fatalf("%v confirmation batches for %d requests", got, 2*n)
	}
	// The confirmations recorded the boots, and the firmware's promise to
	// ask again (the rollout's check that a machine in its loop is alive).
	for i := range n {
		s.eventually(fmt.Sprintf("machine %d's confirmed boot in the registry", i), 10*time.Second, func() (bool, string) {
			m, err := s.machine("acme", uuidN(i))
			return err == nil && !m.LastIPXEBootAt.Before(at.Add(-time.Millisecond)) && m.IPXERetryBy.After(m.LastIPXEBootAt),
				fmt.Sprintf("%v %v %v (want %v)", m.LastIPXEBootAt, m.IPXERetryBy, err, at)
		})
	}
	// Assigned, each boots at its next request, whether or not the boot
	// service's follower of the log has seen the assignment yet.
	for i := range n {
		s.assign("acme", uuidN(i), "workers", 1)
		if script := s.ipxeGet(ipxeURL(i, 3), "", ""); !kernelRe.MatchString(script) {
			t.Fatalf("machine %d assigned, does not boot:\n%s", i, script)
		}
	}
}

// commandsHandled is how many requests on subject were served without
// an error, in this process.
func commandsHandled(t *testing.T, subject string) float64 {
	return counter(t, "anvil_commands_handled_total", map[string]string{"subject": subject, "outcome": "ok"})
}

func knownLookups(t *testing.T, result string) float64 {
	return counter(t, "anvil_boot_ipxe_known_lookups_total", map[string]string{"result": result})
}

func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return eventstest.Metric(t, name, labels).GetCounter().GetValue()
}
