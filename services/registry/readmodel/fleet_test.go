package readmodel

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
)

// envelope is an event as the event store would deliver it.
type envelope struct {
	seq   uint64
	org   string
	uuid  string
	at    time.Time
	event any
}

var base = time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)

func uuidFor(org string, i int) string {
	// Spread machines over the key space; different orgs get different
	// UUIDs except where a test wants a collision.
	h := uint32(i)*2654435761 + uint32(len(org))
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", h, i&0xffff, i%0xfff, len(org)%0xfff, i+1)
}

// fleet generates a realistic event stream for n machines of org. Strings
// are freshly built for every event, as JSON decoding would, so that
// interning has work to do. The stream is deterministic for a seed.
func fleet(org string, n int, seed uint64, seq *uint64) []envelope {
	var out []envelope
	genFleet(org, n, seed, seq, func(e envelope) { out = append(out, e) })
	return out
}

// genFleet streams the events of fleet to sink.
func genFleet(org string, n int, seed uint64, seq *uint64, sink func(envelope)) {
	r := rand.New(rand.NewPCG(seed, 7))
	emit := func(uuid string, i int, e any) {
		*seq++
		sink(envelope{seq: *seq, org: org, uuid: uuid, at: base.Add(time.Duration(*seq) * time.Millisecond), event: e})
	}
	for i := range n {
		id := uuidFor(org, i)
		emit(id, i, machine.Registered{UUID: id, MAC: fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff), EnrollmentTokenID: fmt.Sprintf("tok%013d", i%3), BootedAt: base})
		if r.IntN(10) == 0 {
			continue // stays ready_unassigned
		}
		labels := map[string]string{
			fresh("rack"):                        fmt.Sprintf("r%02d", r.IntN(50)),
			fresh("env"):                         fresh([]string{"prod", "staging", "dev"}[r.IntN(3)]),
			fresh("topology.kubernetes.io/zone"): fmt.Sprintf("eu-%d", r.IntN(4)),
			fresh("tier"):                        fmt.Sprintf("t%d", r.IntN(5)),
		}
		if r.IntN(10) == 0 {
			labels["gpu"] = "a100"
		}
		emit(id, i, machine.LabelsChanged{Labels: labels})
		emit(id, i, machine.HostnameChanged{Hostname: fmt.Sprintf("node-%06d", i)})
		emit(id, i, machine.AssignedToPool{Pool: fmt.Sprintf("pool-%02d", r.IntN(20))})
		emit(id, i, machine.HardwareReported{At: base, Hardware: machine.Hardware{
			CPUs: 64, RAMBytes: 256 << 30,
			Disks: []machine.Disk{{Name: fmt.Sprintf("/dev/nvme%dn1", 0), SizeBytes: 2 << 40}, {Name: fmt.Sprintf("/dev/nvme%dn1", 1), SizeBytes: 2 << 40}},
			NICs: []machine.NIC{
				{Name: fmt.Sprintf("eno%d", 1), MAC: fmt.Sprintf("0c:42:a1:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)},
				{Name: fmt.Sprintf("eno%d", 2), MAC: fmt.Sprintf("0c:42:a2:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)},
			},
		}})
		emit(id, i, machine.TargetRevisionSet{Revision: 1})
		emit(id, i, machine.IgnitionCompleted{At: base.Add(time.Minute)})
		emit(id, i, machine.RevisionBooted{Revision: 1, At: base.Add(time.Minute)})
		switch k := r.IntN(100); {
		case k < 3:
			emit(id, i, machine.Failed{Reason: "join timed out after 10m", During: machine.StatusProvisioning})
		case k < 5:
			// still provisioning
		default:
			emit(id, i, machine.BecameReady{Revision: 1})
			emit(id, i, machine.CameOnline{LastSeenAt: base.Add(time.Minute), At: base.Add(time.Minute)})
			if k < 8 {
				emit(id, i, machine.MaintenanceRequested{})
				emit(id, i, machine.MaintenanceEntered{})
			}
		}
	}
}

// fresh copies s into a new allocation, as decoding JSON would.
func fresh(s string) string { return string([]byte(s)) }

func load(m *Model, evs []envelope) {
	for _, e := range evs {
		m.Apply(e.seq, e.org, e.uuid, e.at, e.event)
	}
}
