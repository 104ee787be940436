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
