package app

import (
	"context"
	"crypto/subtle"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

var (
	knownLookups = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_known_lookups_total",
		Help: "/ipxe requests by whether the machine's boot decision was answered from memory (hit), it was remembered as waiting and confirmed with the registry in a shared batch (wait), or asked of the registry on its own (miss).",
	}, []string{"result"})
	bootReports = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "anvil_boot_ipxe_boot_reports_total",
		Help: "iPXE boots answered from memory and reported to the registry afterwards, by result: sent, refused (the machine is asked again at its next boot), failed.",
	}, []string{"result"})
	bootReportsPending = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "anvil_boot_ipxe_boot_reports_pending",
		Help: "Machines whose latest iPXE boot waits to be reported to the registry.",
	})
	// Looked up once: they are counted on every /ipxe.
	knownHits, knownMisses, knownWaits = knownLookups.WithLabelValues("hit"), knownLookups.WithLabelValues("miss"), knownLookups.WithLabelValues("wait")
)

// KnownMachines lets /ipxe answer a machine that boots from memory: the
// registry's last answer for it (given the same enrollment token, UUID and
// MAC), as long as nothing changed since. It forgets a machine at any
// event of the machine (Forget, from the boot service's follower of the
// log), every machine of an organization at any event of the organization
// (a token revoked, ForgetOrg), everything when the follower subscribes
// again (Reset: it may have missed events), and any answer after a TTL
// (an enrollment token's expiry is not an event). A machine that waits
// (no pool, no target revision, being deleted) is remembered too, but not
// answered from memory alone: what an operator does next (assigning it)
// must show at its next request, which the follower of the log may not
// have seen yet. Its request is confirmed with the registry together with
// every other waiting machine's that arrives meanwhile (ConfirmWait).
//
// The boots it answers are reported to the registry off the request path
// (Run): at most one report per machine per report interval, carrying the
// machine's latest boot; each report's answer refreshes the machine's
// entry. The registry's last iPXE boot of a machine answered from memory
// is thus at most that interval (plus the report's own time) old.
type KnownMachines struct {
	ttl, reportEvery time.Duration
	max              int

	mu      sync.Mutex
	entries map[string]*knownEntry          // by UUID
	floors  map[machineRef]uint64           // stream sequence of the latest event seen per machine
	gen     uint64                          // grows at every ForgetOrg and Reset
	pending map[string]*regapi.SelfRegister // by UUID
	wake    chan struct{}

	// the waiting machines' requests to confirm with the registry, and
	// the batches under way (ConfirmWait)
	cmu           sync.Mutex
	confirmQueue  []*waitConfirm
	confirmFlying int
}

type (
	machineRef struct{ org, uuid string }
	knownEntry struct {
		token      string // the enrollment token the registry accepted
		machine    regapi.Machine
		version    uint64
		mac        string
		at         time.Time // when the registry answered
		reportedAt time.Time // when the registry last heard of a boot
		// prepared is the boot script rendered up to what each request
		// changes, for requests whose base URL is preparedFor.
		prepared    *preparedBoot
		preparedFor string
		// queued is the machine's boot in pending, once a boot of this
		// entry found it there (nil: look it up): a machine that boots
		// again overwrites it without touching the map.
		queued *regapi.SelfRegister
	}
)

// KnownBoot is a machine answered from memory.
type KnownBoot struct {
	Machine regapi.Machine
	// Waits: the machine waits (as the registry last answered); its
	// request is confirmed with the registry (ConfirmWait), and its boot
	// is recorded by that, not queued.
	Waits   bool
	version uint64
	entry   *knownEntry
	// what was prepared for its boot script, and for which base URL, when
	// it was looked up
	prepared    *preparedBoot
	preparedFor string
}

// KnownTicket is taken before the registry is asked: an answer is kept
// only if nothing was forgotten meanwhile that it might predate.
type KnownTicket struct{ gen uint64 }

// NewKnownMachines keeps answers for ttl and reports boots at most every
// reportEvery per machine.
func NewKnownMachines(ttl, reportEvery time.Duration) *KnownMachines {
	return &KnownMachines{ttl: ttl, reportEvery: reportEvery, max: 1 << 18,
		entries: map[string]*knownEntry{}, floors: map[machineRef]uint64{}, pending: map[string]*regapi.SelfRegister{},
		wake: make(chan struct{}, 1)}
}

// Ticket is taken before asking the registry.
func (k *KnownMachines) Ticket() KnownTicket {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KnownTicket{gen: k.gen}
}

// Boot returns the machine as the registry last answered for this token,
// UUID and MAC, if that answer still stands, and queues the boot r for the
// registry.
func (k *KnownMachines) Boot(r regapi.SelfRegister, now time.Time) (KnownBoot, bool) {
	key := r.UUID
	k.mu.Lock()
	e, ok := k.entries[key]
	if ok && (subtle.ConstantTimeCompare([]byte(e.token), []byte(r.EnrollmentToken)) != 1 || e.mac != r.MAC || now.Sub(e.at) >= k.ttl) {
		ok = false
	}
	if !ok {
		k.mu.Unlock()
		knownMisses.Inc()
		return KnownBoot{}, false
	}
	kb := KnownBoot{Machine: e.machine, version: e.version, entry: e, prepared: e.prepared, preparedFor: e.preparedFor}
	if waitReason(e.machine) != "" {
		k.mu.Unlock()
		kb.Waits = true
		knownWaits.Inc()
		return kb, true
	}
	if e.queued == nil {
		q, queued := k.pending[key]
		if !queued {
			q = new(regapi.SelfRegister)
			k.pending[key] = q
			bootReportsPending.Inc()
		}
		e.queued = q
	}
	*e.queued = r
	due := now.Sub(e.reportedAt) >= k.reportEvery
	k.mu.Unlock()
	knownHits.Inc()
	if due {
		k.signal()
	}
	return kb, true
}

// prepared returns the boot script prepared for kb's machine at base.
func (kb KnownBoot) preparedAt(base string) *preparedBoot {
	if kb.preparedFor != base {
		return nil
	}
	return kb.prepared
}

// keepPrepared keeps the boot script prepared for kb's machine at base.
func (k *KnownMachines) keepPrepared(kb KnownBoot, base string, p *preparedBoot) {
	if kb.entry == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	kb.entry.prepared, kb.entry.preparedFor = p, base
}

// keepPreparedFor keeps the boot script prepared at base for machine m,
// if what is remembered of it boots it the same way.
func (k *KnownMachines) keepPreparedFor(m regapi.Machine, base string, p *preparedBoot) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.entries[m.UUID]; ok && sameBoot(e.machine, m) {
		e.prepared, e.preparedFor = p, base
	}
}

// Remember keeps the registry's answer to a boot (reply to r), whether it
// booted the machine or told it to wait, unless something it may predate
// was forgotten since t.
func (k *KnownMachines) Remember(t KnownTicket, r regapi.SelfRegister, reply regapi.MachineReply, now time.Time) {
	m := reply.Machine
	ref := machineRef{m.Org, m.UUID}
	if m.Org == "" || m.UUID == "" || reply.Deleted {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if t.gen != k.gen || k.floors[ref] > reply.Version || r.UUID != m.UUID {
		return
	}
	if len(k.entries) >= k.max {
		k.resetLocked()
		return
	}
	e := &knownEntry{token: r.EnrollmentToken, machine: m, version: reply.Version, mac: r.MAC, at: now, reportedAt: now}
	if old := k.entries[r.UUID]; old != nil && sameBoot(old.machine, m) {
		// A report's answer for a machine that still boots the same
		// revision: its prepared boot script stands.
		e.prepared, e.preparedFor = old.prepared, old.preparedFor
	}
	k.entries[r.UUID] = e
}

// sameBoot reports whether two answers for a machine boot it the same
// way: its boot script is made of these and of the pool revision's
// (immutable) Flatcar image.
func sameBoot(a, b regapi.Machine) bool {
	return a.Org == b.Org && a.UUID == b.UUID && a.Pool == b.Pool && a.TargetRevision == b.TargetRevision
}

// refresh renews the entry of a reported boot's machine after the
// registry answered that it is still at version: as Remember would with
// the same machine.
func (k *KnownMachines) refresh(t KnownTicket, r regapi.SelfRegister, version uint64, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t.gen != k.gen {
		return
	}
	if e, ok := k.entries[r.UUID]; ok && e.version == version && e.token == r.EnrollmentToken && e.mac == r.MAC {
		e.at, e.reportedAt = now, now
	}
}

// Forget drops what is known of a machine: an event at stream sequence
// seq changed it (0: something the boot service saw itself, such as an
// instruction to reboot it).
func (k *KnownMachines) Forget(org, uuid string, seq uint64) {
	ref := machineRef{org, uuid}
	k.mu.Lock()
	defer k.mu.Unlock()
	if seq == 0 {
		// No sequence to hold answers back with: an answer the registry
		// gave before this (a ticket taken earlier) must not be kept.
		k.gen++
	}
	if seq > k.floors[ref] {
		if len(k.floors) >= k.max {
			k.resetLocked()
		}
		k.floors[ref] = seq
	}
	// An answer given after the event (its own boot's, say) stands.
	if e, ok := k.entries[uuid]; ok && e.machine.Org == org && (seq == 0 || e.version < seq) {
		delete(k.entries, uuid)
	}
}

// ForgetOrg drops every machine of an organization (one of its tokens
// may have been revoked).
func (k *KnownMachines) ForgetOrg(org string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	for uuid, e := range k.entries {
		if e.machine.Org == org {
			delete(k.entries, uuid)
		}
	}
}

// Reset drops everything: the follower of the log (re)subscribed, and may
// have missed events in between.
func (k *KnownMachines) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.resetLocked()
}

func (k *KnownMachines) resetLocked() {
	k.gen++
	clear(k.entries)
	clear(k.floors)
	// Queued reports stay: the boots happened.
}

// Len is the number of machines answered from memory (for tests).
func (k *KnownMachines) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}

func (k *KnownMachines) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// due takes the queued boots whose machine may be reported now.
func (k *KnownMachines) due(now time.Time) []regapi.SelfRegister {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []regapi.SelfRegister
	for key, r := range k.pending {
		e, ok := k.entries[key]
		if ok && now.Sub(e.reportedAt) < k.reportEvery {
			continue
		}
		out = append(out, *r)
		delete(k.pending, key)
		if ok {
			e.reportedAt, e.queued = now, nil
		}
	}
	bootReportsPending.Sub(float64(len(out)))
	return out
}

// requeue puts back a boot whose report failed, unless the machine has
// booted again meanwhile (the newer boot is queued and carries more).
func (k *KnownMachines) requeue(r regapi.SelfRegister) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, newer := k.pending[r.UUID]; !newer {
		k.pending[r.UUID] = &r
		bootReportsPending.Inc()
	}
}

// Pending is the number of boots waiting to be reported.
func (k *KnownMachines) Pending() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pending)
}

// reportWorkers bound the registry calls that reports make at once, so
// that they never take more than that from the requests being served
// (when the registry takes no batches).
const reportWorkers = 4

// reportBatch is the most boots one batched report carries.
const reportBatch = 500

// Run reports the boots answered from memory to the registry until ctx
// ends, then reports what is still queued (best effort, briefly).
func (k *KnownMachines) Run(ctx context.Context, reg Registry, now func() time.Time, log debugLog) {
	tick := time.NewTicker(max(k.reportEvery/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			k.report(fctx, reg, now, log, k.drain())
			cancel()
			return
		case <-tick.C:
		case <-k.wake:
		}
		k.report(ctx, reg, now, log, k.due(now()))
	}
}

func (k *KnownMachines) drain() []regapi.SelfRegister {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]regapi.SelfRegister, 0, len(k.pending))
	for key, r := range k.pending {
		out = append(out, *r)
		delete(k.pending, key)
		if e, ok := k.entries[key]; ok {
			e.queued = nil
		}
	}
	bootReportsPending.Sub(float64(len(out)))
	return out
}

type debugLog interface {
	DebugContext(context.Context, string, ...any)
}

// report sends boots to the registry: in batches when it takes them,
// else (or when a batch fails: a registry that does not serve batches
// yet) one by one.
func (k *KnownMachines) report(ctx context.Context, reg Registry, now func() time.Time, log debugLog, boots []regapi.SelfRegister) {
	br, batches := reg.(BootReporter)
	for len(boots) > 0 {
		chunk := boots[:min(len(boots), reportBatch)]
		boots = boots[len(chunk):]
		if !batches || !k.reportBatch(ctx, br, now, log, chunk) {
			k.reportEach(ctx, reg, now, log, chunk)
		}
	}
}

// reportBatch reports boots in one request and takes in the registry's
// answer for each, as reportEach does; false when the request failed as a
// whole (nothing was taken in).
func (k *KnownMachines) reportBatch(ctx context.Context, reg BootReporter, now func() time.Time, log debugLog, boots []regapi.SelfRegister) bool {
	req := make([]regapi.ReportedIPXEBoot, len(boots))
	k.mu.Lock()
	for i, r := range boots {
		req[i] = regapi.ReportedIPXEBoot{SelfRegister: r}
		if e, ok := k.entries[r.UUID]; ok && e.token == r.EnrollmentToken {
			req[i].Version = e.version // the answer leaves the machine out while it did not change
		}
	}
	t := KnownTicket{gen: k.gen}
	k.mu.Unlock()
	results, err := reg.ReportIPXEBoots(ctx, req)
	if err == nil && len(results) != len(boots) {
		err = errs.Internal("the registry answered %d boots with %d results", len(boots), len(results))
	}
	if err != nil {
		if command.IsNoResponder(err) {
			// a registry that does not serve batches (yet: a rolling upgrade)
			log.DebugContext(ctx, "iPXE boots not reported in a batch; reporting them one by one", "boots", len(boots), "err", err)
			return false
		}
		// A registry that did not answer in time may still be working on
		// the batch: sending each boot now would double its load when it
		// is already behind. They go again with the next round.
		log.DebugContext(ctx, "iPXE boots not reported; they go again with the next round", "boots", len(boots), "err", err)
		for _, r := range boots {
			k.requeue(r)
		}
		return true
	}
	// The answers that keep machines first: forgetting one (a refusal)
	// voids the batch's ticket.
	for i, res := range results {
		r := boots[i]
		switch {
		case res.Error != nil:
		case res.Machine == nil:
			bootReports.WithLabelValues("sent").Inc()
			k.refresh(t, r, res.Version, now())
		default:
			// It boots another revision now, or waits: either way its
			// next request finds the registry's newer answer.
			bootReports.WithLabelValues("sent").Inc()
			k.Remember(t, r, regapi.MachineReply{Machine: *res.Machine, Version: res.Version}, now())
		}
	}
	for i, res := range results {
		if res.Error != nil {
			k.reported(ctx, log, boots[i], res.Error)
		}
	}
	return true
}

// reported counts the registry's answer to a reported boot and acts on a
// refusal (the machine is asked about at its next boot) or a failure (the
// boot is reported again); true when the answer is to be remembered.
func (k *KnownMachines) reported(ctx context.Context, log debugLog, r regapi.SelfRegister, err error) bool {
	switch {
	case err == nil:
		bootReports.WithLabelValues("sent").Inc()
		return true
	case !errs.Is(err, errs.KindUnavailable):
		// Refused: its next boot asks.
		bootReports.WithLabelValues("refused").Inc()
		k.forgetKey(r)
	default:
		// The registry is away: the boot is reported with the
		// next round, unless a newer one takes its place.
		bootReports.WithLabelValues("failed").Inc()
		log.DebugContext(ctx, "iPXE boot not reported to the registry yet", "uuid", r.UUID, "err", err)
		k.requeue(r)
	}
	return false
}

// reportEach reports boots one SelfRegister each, reportWorkers at once.
func (k *KnownMachines) reportEach(ctx context.Context, reg Registry, now func() time.Time, log debugLog, boots []regapi.SelfRegister) {
	work := make(chan regapi.SelfRegister)
	var wg sync.WaitGroup
	for range min(reportWorkers, len(boots)) {
		wg.Go(func() {
			for r := range work {
				t := k.Ticket()
				reply, err := reg.SelfRegister(ctx, r)
				if k.reported(ctx, log, r, err) {
					k.Remember(t, r, reply.MachineReply, now())
				}
			}
		})
	}
	for _, r := range boots {
		work <- r
	}
	close(work)
	wg.Wait()
}

func (k *KnownMachines) forgetKey(r regapi.SelfRegister) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++ // an answer under way for it must not bring it back
	if e, ok := k.entries[r.UUID]; ok && e.token == r.EnrollmentToken {
		delete(k.entries, r.UUID)
	}
}
