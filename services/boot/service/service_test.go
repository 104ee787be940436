package service_test

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/agent"
	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// runningAgent is the real agent code running against the boot service, as
// Flatcar would start it from what Ignition wrote.
type runningAgent struct {
	cancel context.CancelFunc
	done   chan error
	logs   *eventstest.SyncBuffer
	once   sync.Once
}

func (r *runningAgent) stop(t testing.TB) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop")
		}
	})
}

// startAgent configures the agent from the served Ignition exactly as the
// binary does (the env file, the revision file, the SMBIOS UUID under its
// root) and runs it. reboots receives the reason of every reboot.
func (s *stack) startAgent(uuid string, ign served, stateFile, bootID string, reboots chan<- string) *runningAgent {
	s.t.Helper()
	root := fakeRoot(s.t, uuid, map[string]string{"/etc/anvil/revision": ign.files["/etc/anvil/revision"]})
	env, err := agent.ParseEnvFile([]byte(ign.files["/etc/anvil/agent.env"]))
	if err != nil {
		s.t.Fatal(err)
	}
	logs := &eventstest.SyncBuffer{}
	cfg := agent.Config{
		Root: root, StateFile: stateFile, BootID: bootID,
		HeartbeatInterval: 300 * time.Millisecond, ReportInterval: time.Second, PollWait: 2 * time.Second,
		MinPollInterval: 50 * time.Millisecond, RetryInitial: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		RequestTimeout: 10 * time.Second,
		Rebooter: agent.RebooterFunc(func(_ context.Context, reason string) error {
			reboots <- reason
			return nil
		}),
		Journal: agent.JournalFunc(func(context.Context, int) ([]string, error) {
			return []string{"2026-03-01T10:00:00+0000 " + uuid + " systemd[1]: Started anvil-agent.service."}, nil
		}),
		Logger: slogJSON(logs),
	}
	if err := agent.ApplyEnv(&cfg, env); err != nil {
		s.t.Fatal(err)
	}
	if cfg.BootedRevision, err = agent.ReadRevisionFile(filepath.Join(root, "etc/anvil/revision")); err != nil {
		s.t.Fatal(err)
	}
	a, err := agent.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { r.done <- a.Run(ctx) }()
	s.t.Cleanup(func() { r.stop(s.t) })
	return r
}

// register boots an unknown machine once (it registers itself and waits)
// and waits until the registry's projection shows it: the registry decides
// commands on its projection, which lags its writes a little.
func (s *stack) register(org, uuid, mac, enroll string) string {
	s.t.Helper()
	script := s.ipxeGet(s.url+"/ipxe?uuid="+uuid+"&mac="+mac+"&token="+enroll, uuid, mac)
	s.eventually("machine registered", 10*time.Second, func() (bool, string) {
		m, err := s.machine(org, uuid)
		return err == nil && m.Status != regapi.StatusPreregistered, mustJSON(m) + errString(err)
	})
	return script
}

// bootMachine takes an unassigned, registered machine through /ipxe and
// /ignition into revision rev of pool, and returns the served config.
func (s *stack) bootMachine(org, uuid, mac, enroll string) (bootScript, served) {
	s.t.Helper()
	next := chainTarget(s.t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, uuid, mac))
	b := parseBoot(s.t, s.ipxeGet(next, uuid, mac))
	return b, s.ignition(b.ignitionURL)
}

var sleepRe = regexp.MustCompile(`(?m)^sleep (\d+)$`)

func firstSleep(t testing.TB, script string) int {
	t.Helper()
	m := sleepRe.FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no sleep in\n%s", script)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestBootSequenceOverHTTP is a machine's whole first boot against the real
// registry, revisions and boot services over real HTTP, ending with the real
// agent's first heartbeat and report.
func TestBootSequenceOverHTTP(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	uuid, mac := uuidN(1), "52-54-00-12-34-56"

	// The chain URL an operator puts into DHCP.
	chain := s.get(s.url + "/boot.ipxe?token=" + enroll)
	checkScript(t, chain)
	next := chainTarget(t, chain.body)
	if !strings.Contains(next, "/ipxe?uuid=${uuid}&mac=${net0/mac:hexhyp}&token="+enroll) {
		t.Fatalf("chain target %s", next)
	}

	// Unknown machine: it registers itself and is told to wait.
	wait := s.ipxeGet(next, uuid, mac)
	if !strings.Contains(wait, "waiting to be assigned to a machine pool") || !strings.Contains(wait, "organization acme") {
		t.Fatalf("wait script:\n%s", wait)
	}
	s.eventually("machine registered", 10*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.Status == regapi.StatusReadyUnassigned && m.MAC == "52:54:00:12:34:56" && !m.LastIPXEBootAt.IsZero(),
			mustJSON(m) + errString(err)
	})
	// It asks again with a growing delay, carried in the URL.
	retry := chainTarget(t, wait)
	if !strings.HasSuffix(retry, "&attempt=1") {
		t.Fatalf("retry URL %s", retry)
	}
	wait2 := s.ipxeGet(retry, uuid, mac)
	if a, b := firstSleep(t, wait), firstSleep(t, wait2); b <= a {
		t.Errorf("backoff does not grow: %d then %d", a, b)
	}

	// Assigned to a pool with a target revision, it boots Flatcar.
	s.pool("acme", "workers")
	s.assign("acme", uuid, "workers", 1)
	b := parseBoot(t, s.ipxeGet(next, uuid, mac))
	if b.kernel != "http://mirror.test/flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz" ||
		b.initrd != "http://mirror.test/flatcar/stable/4230.2.3/flatcar_production_pxe_image.cpio.gz" {
		t.Errorf("images %s %s", b.kernel, b.initrd)
	}
	for _, want := range []string{"flatcar.first_boot=1", "initrd=flatcar_production_pxe_image.cpio.gz", "console=ttyS0,115200n8"} {
		if !strings.Contains(strings.Join(b.args, " "), want) {
			t.Errorf("kernel args lack %s: %v", want, b.args)
		}
	}
	if !strings.HasPrefix(b.ignitionURL, s.url+"/ignition?uuid="+uuid+"&token=pb2.") {
		t.Fatalf("ignition URL %s", b.ignitionURL)
	}

	// The kernel and initrd take a while; anvil_boot_ipxe_to_ignition_seconds
	// measures from the per-boot token's issue (the /ipxe above) to the fetch.
	count, sum := s.metric("anvil_boot_ipxe_to_ignition_seconds_count"), s.metric("anvil_boot_ipxe_to_ignition_seconds_sum")
	s.clock.advance(42 * time.Second)
	ign := s.ignition(b.ignitionURL)
	if dc, ds := s.metric("anvil_boot_ipxe_to_ignition_seconds_count")-count, s.metric("anvil_boot_ipxe_to_ignition_seconds_sum")-sum; dc != 1 || ds < 42 || ds > 120 {
		t.Errorf("iPXE to Ignition: %v more observations adding %vs, want 1 of about 42s", dc, ds)
	}
	t.Logf("Ignition config: %d bytes", len(ign.raw))
	mrid := strings.TrimSpace(ign.files["/etc/anvil/revision"])
	if !regexp.MustCompile(`^mr-[0-9a-f]{20}$`).MatchString(mrid) || ign.files["/etc/hostname"] != uuid+"\n" {
		t.Fatalf("revision %q, hostname %q", mrid, ign.files["/etc/hostname"])
	}
	// The renderer writes ANVIL_URL or ANVIL_BOOT_URL (the agent reads
	// both) and no UUID (the agent reads SMBIOS).
	env := ign.files["/etc/anvil/agent.env"]
	if !regexp.MustCompile(`(?m)^ANVIL_(BOOT_)?URL=`+regexp.QuoteMeta(s.url)+`$`).MatchString(env) || !strings.HasPrefix(ign.credential, "ac2_acme_"+mrid+"_") {
		t.Fatalf("agent.env:\n%s", ign.files["/etc/anvil/agent.env"])
	}

	// The real agent, configured from what Ignition wrote.
	reboots := make(chan string, 4)
	ag := s.startAgent(uuid, ign, filepath.Join(t.TempDir(), "state.json"), "boot-1", reboots)
	s.eventually("machine fully booted", 30*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		ok := err == nil && m.CurrentRevision == 1 && !m.LastIPXEBootAt.IsZero() && !m.LastIgnitionAt.IsZero() &&
			!m.LastSeen.IsZero() && m.Hardware != nil && m.Hardware.CPUs == 16 && len(m.Hardware.NICs) == 2
		return ok, mustJSON(m) + " " + errString(err)
	})
	s.eventually("startup log", 10*time.Second, func() (bool, string) {
		logs, err := api.GetStartupLog(s.ctx, s.nc, api.MachineRef{Org: "acme", UUID: uuid})
		return err == nil && logs.BootedRevision == mrid && len(logs.Lines) == 1 && len(logs.Problems) == 0, mustJSON(logs) + errString(err)
	})
	if strings.Contains(ag.logs.String(), ign.credential) || strings.Contains(s.logs.String(), ign.credential) {
		t.Error("the agent credential appears in a log")
	}
	if strings.Contains(s.logs.String(), bootstrapTok) {
		t.Error("the join token appears in a log")
	}
	select {
	case r := <-reboots:
		t.Errorf("unexpected reboot: %s", r)
	default:
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestPreRegisteredMachineBootsWithItsSettings: a machine pre-registered
// with a hostname, labels and a pool takes them over when it boots, and its
// Ignition carries them.
func TestPreRegisteredMachineBootsWithItsSettings(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(7), "52-54-00-00-00-07"
	if _, err := s.reg.Machine(s.ctx, "acme", uuid, regapi.PreRegister{UUID: uuid, Hostname: "worker-07", Pool: "workers",
		Labels: map[string]string{"rack": "r1"}}, 0); err != nil {
		t.Fatal(err)
	}
	// First boot: it takes over its configuration and waits for a revision.
	wait := s.register("acme", uuid, mac, enroll)
	if !strings.Contains(wait, "assigned to pool workers; it provisions itself with the") {
		t.Fatalf("wait script:\n%s", wait)
	}
	r, err := s.reg.Machine(s.ctx, "acme", uuid, regapi.SetTargetRevision{Revision: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.waitMachine(r.Version)
	_, ign := s.bootMachine("acme", uuid, mac, enroll)
	if ign.files["/etc/hostname"] != "worker-07\n" {
		t.Errorf("hostname %q", ign.files["/etc/hostname"])
	}
	if join := ign.files["/etc/kubeadm/join.yaml"]; !strings.Contains(join, "rack=r1") || !strings.Contains(join, "worker-07") {
		t.Errorf("join configuration lacks the machine's settings:\n%s", join)
	}
}

// TestInstructionDelivery: a RebootRequested event reaches the running
// agent, which accepts it and reboots once; a redelivered event is not
// delivered again; after the reboot the machine boots the new revision,
// the instruction is settled, and the old credential is refused.
func TestInstructionDelivery(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(2), "52-54-00-00-00-02"
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	_, ign1 := s.bootMachine("acme", uuid, mac, enroll)
	mr1 := strings.TrimSpace(ign1.files["/etc/anvil/revision"])
	state := filepath.Join(t.TempDir(), "state.json")
	reboots := make(chan string, 8)
	var rebootCount atomic.Int32
	counted := make(chan string, 8)
	go func() {
		for r := range reboots {
			rebootCount.Add(1)
			counted <- r
		}
	}()
	agent1 := s.startAgent(uuid, ign1, state, "boot-1", reboots)
	s.eventually("revision 1 booted", 30*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.CurrentRevision == 1, mustJSON(m)
	})

	// A rollout moves the machine to revision 2 and asks for the reboot.
	rev2 := s.newRevision("acme", "workers", "4230.2.4")
	r, err := s.reg.Machine(s.ctx, "acme", uuid, regapi.SetTargetRevision{Revision: uint64(rev2)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.waitMachine(r.Version)
	req := api.RebootRequested{Org: "acme", UUID: uuid, InstructionID: "i-0190a1b2", Kind: api.KindReboot, Pool: "workers",
		Revision: uint64(rev2), Reason: "rollout r-1 step 1"}
	rollout := events.AggregateRef{Org: "acme", Type: "rollout", ID: "r-1"}
	if _, err := s.env.Store.Append(s.ctx, rollout, events.Any, events.New(req)...); err != nil {
		t.Fatal(err)
	}
	var reason string
	select {
	case reason = <-counted:
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent was never told to reboot\nagent: %s", agent1.logs.String())
	}
	if !strings.Contains(reason, "instruction i-0190a1b2: reboot into revision mr-") || !strings.Contains(reason, "(booted "+mr1+")") {
		t.Errorf("reboot reason %q", reason)
	}
	s.eventually("accepted", 10*time.Second, func() (bool, string) {
		in, err := api.GetInstruction(s.ctx, s.nc, api.InstructionRef{Org: "acme", UUID: uuid, InstructionID: req.InstructionID})
		return err == nil && in.Status == api.StatusAccepted && in.Deliveries == 1, mustJSON(in) + errString(err)
	})

	// The event is delivered again (a retried append, a redelivery): the
	// instruction is not stored or delivered twice.
	if _, err := s.env.Store.Append(s.ctx, rollout, events.Any, events.New(req)...); err != nil {
		t.Fatal(err)
	}
	s.waitHandlersIdle()
	list, err := api.ListInstructions(s.ctx, s.nc, api.MachineRef{Org: "acme", UUID: uuid})
	if err != nil || len(list.Items) != 1 || list.Items[0].Deliveries != 1 || list.Items[0].Status != api.StatusAccepted {
		t.Fatalf("after redelivery: %+v %v", list, err)
	}

	// The machine reboots: the agent goes away, iPXE and Ignition serve
	// revision 2, and the new agent (same state file, new boot) starts.
	agent1.stop(t)
	b, ign2 := s.bootMachine("acme", uuid, mac, enroll)
	if !strings.Contains(b.kernel, "/4230.2.4/") {
		t.Errorf("rebooted into %s", b.kernel)
	}
	mr2 := strings.TrimSpace(ign2.files["/etc/anvil/revision"])
	if mr2 == mr1 || ign2.credential == ign1.credential {
		t.Fatal("a new revision must bring a new machine revision and a new credential")
	}
	s.startAgent(uuid, ign2, state, "boot-2", reboots)
	s.eventually("instruction settled", 30*time.Second, func() (bool, string) {
		in, err := api.GetInstruction(s.ctx, s.nc, api.InstructionRef{Org: "acme", UUID: uuid, InstructionID: req.InstructionID})
		return err == nil && in.Status == api.StatusDone && in.AgentStatus == api.StatusDone && in.MachineRevisionID == mr2 &&
			!in.RebootSeenAt.IsZero(), mustJSON(in) + errString(err)
	})
	s.eventually("revision 2 booted", 30*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.CurrentRevision == uint64(rev2), mustJSON(m)
	})
	if n := rebootCount.Load(); n != 1 {
		t.Errorf("the agents rebooted %d times, want 1", n)
	}
	// The old revision's credential is rotated out.
	old := do(t, http.DefaultClient, http.MethodPost, s.url+"/agent/v1/machines/"+uuid+"/heartbeat", "Bearer "+ign1.credential, strings.NewReader(`{"booted_revision":"`+mr1+`"}`))
	if old.status != http.StatusUnauthorized || !strings.Contains(old.body, "rotate") {
		t.Errorf("old credential: %d %s", old.status, old.body)
	}
}

// waitHandlersIdle waits until the boot service's instruction handlers
// have acknowledged everything in the log.
func (s *stack) waitHandlersIdle() {
	s.t.Helper()
	s.eventually("instruction handlers idle", 30*time.Second, func() (bool, string) {
		c, err := s.env.JS.Consumer(s.ctx, events.StreamName, "handler-boot-instructions-rollout")
		if err != nil {
			return false, err.Error()
		}
		info, err := c.Info(s.ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.NumPending == 0 && info.NumAckPending == 0, mustJSON(info)
	})
}

// TestWithdrawnInstructionIsRefused: the agent is answered 409 when it
// tries to accept a withdrawn instruction, and does not reboot.
func TestWithdrawnInstructionIsNotDelivered(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(3), "52-54-00-00-00-03"
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	_, ign := s.bootMachine("acme", uuid, mac, enroll)
	rollout := events.AggregateRef{Org: "acme", Type: "operation", ID: "op-1"}
	req := api.RebootRequested{Org: "acme", UUID: uuid, InstructionID: "i-w", Kind: api.KindReapply, Revision: 1}
	if _, err := s.env.Store.Append(s.ctx, rollout, events.Any, events.New(req, api.InstructionWithdrawn{Org: "acme", UUID: uuid, InstructionID: "i-w", Reason: "aborted"})...); err != nil {
		t.Fatal(err)
	}
	s.eventually("withdrawn", 30*time.Second, func() (bool, string) {
		in, err := api.GetInstruction(s.ctx, s.nc, api.InstructionRef{Org: "acme", UUID: uuid, InstructionID: "i-w"})
		return err == nil && in.Status == api.StatusWithdrawn, mustJSON(in) + errString(err)
	})
	auth := "Bearer " + ign.credential
	poll := do(t, http.DefaultClient, http.MethodGet, s.url+"/agent/v1/machines/"+uuid+"/instructions?wait=0", auth, nil)
	if poll.status != http.StatusNoContent {
		t.Errorf("poll: %d %s", poll.status, poll.body)
	}
	ack := do(t, http.DefaultClient, http.MethodPost, s.url+"/agent/v1/machines/"+uuid+"/instructions/i-w/ack", auth, strings.NewReader(`{"status":"accepted"}`))
	if ack.status != http.StatusConflict || !strings.Contains(ack.header.Get("Content-Type"), "problem+json") {
		t.Errorf("accepting a withdrawn instruction: %d %s", ack.status, ack.body)
	}
	if _, err := api.GetInstruction(s.ctx, s.nc, api.InstructionRef{Org: "acme", UUID: uuid, InstructionID: "nope"}); err == nil {
		t.Error("unknown instruction found")
	}
}

// TestIgnitionIsRenderedAheadOfTheBoot: targeting a machine renders its
// Ignition into the cache while its firmware waits, so its boot is a cache
// hit.
func TestIgnitionIsRenderedAheadOfTheBoot(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(4), "52-54-00-00-00-04"
	s.register("acme", uuid, mac, enroll)
	if _, err := s.reg.Machine(s.ctx, "acme", uuid, regapi.SetHostname{Hostname: "worker-04"}, 0); err != nil {
		t.Fatal(err)
	}
	s.assign("acme", uuid, "workers", 1)
	s.eventually("rendered ahead", 30*time.Second, func() (bool, string) {
		n := s.metric(`anvil_boot_ignition_prepared_total{result="rendered"}`)
		return s.boot.Cache.Len() == 1 && n >= 1 && s.boot.Preparer.Pending() == 0, mustJSON(map[string]any{"cached": s.boot.Cache.Len(), "rendered": n})
	})
	renders := s.metric("anvil_boot_ignition_cache_renders_total")
	hits := s.metric(`anvil_boot_ignition_cache_lookups_total{result="hit"}`)
	_, ign := s.bootMachine("acme", uuid, mac, enroll)
	if ign.files["/etc/hostname"] != "worker-04\n" {
		t.Errorf("hostname %q", ign.files["/etc/hostname"])
	}
	if s.metric("anvil_boot_ignition_cache_renders_total") != renders || s.metric(`anvil_boot_ignition_cache_lookups_total{result="hit"}`) != hits+1 {
		t.Error("the boot rendered again instead of using the config rendered ahead")
	}
}
