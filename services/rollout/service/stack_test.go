package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	bootservice "github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	regservice "github.com/anvil-fleet/anvil/services/registry/service"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	revservice "github.com/anvil-fleet/anvil/services/revisions/service"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/service"
	"github.com/anvil-fleet/anvil/sim"
)

var (
	encryptionKey = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	signingKey    = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
	k8sVersions   = "1.36.4,1.37.1"
	testActor     = "token:t1 (test)"
)

// stack is the real control plane of a rollout: an embedded JetStream with
// the registry, revisions, boot and rollout services on it (each with its
// own connection, talking only over NATS), a real kube-apiserver with kwok
// from the harness, and a simulated fleet running the real agent.
type stack struct {
	t testing.TB
	// root is the top-level test: the services and their connections
	// live as long as it, whichever scenario (sub)test restarts them.
	root testing.TB
	env  *eventstest.Env
	nc   *nats.Conn
	ctx  context.Context
	cp   *kubeharness.ControlPlane
	reg  regapi.Client
	regs *regservice.Service
	api  api.Client
	url  string
	// fleetNet can carry a simulated fleet's HTTP to the boot service in
	// memory (sim.Config.HTTPClient = fleetNet.HTTPClient()): 10,000
	// agents' long polls over TCP would hold more file descriptors than
	// the process may open. Smaller fleets use TCP, which costs less CPU.
	fleetNet *sim.MemNetwork
	logs     *eventstest.SyncBuffer

	mu         sync.Mutex
	appliedAt  map[string]time.Time // pool: when the last apply was asked for
	rollout    *service.Service
	stopRoll   func()
	rolloutCfg service.Config
}

// offlineAfter is the registry's heartbeat silence after which a machine
// is offline, in every stack: the simulated agents must heartbeat well
// within it (TestIntervals: 500 ms), or the rollout's machines_healthy
// check finds them offline.
const offlineAfter = 10 * time.Second

// stackOptions change a stack from newStackWith's defaults.
type stackOptions struct {
	// offlineAfter: the registry's; 0 is offlineAfter.
	offlineAfter time.Duration
	// kubeQPS and kubeBurst: the rollout service's client limits for the
	// workload cluster; 0 is its default.
	kubeQPS   float64
	kubeBurst int
	// enrollmentRate and enrollmentBurst: the registry's bound on new
	// registrations per enrollment token; 0 is its default (10/s, 100).
	enrollmentRate  float64
	enrollmentBurst int
	// leaseTTL: the rollout's --lease-ttl; 0 is 3 s, so that the tests
	// that kill a driver see another take over quickly.
	leaseTTL time.Duration
	// kube: options of the test's Kubernetes control plane.
	kube []kubeharness.Option
}

func newStack(t testing.TB) *stack {
	t.Helper()
	return newStackWith(t, stackOptions{})
}

func newStackWith(t testing.TB, o stackOptions) *stack {
	t.Helper()
	if o.offlineAfter == 0 {
		o.offlineAfter = offlineAfter
	}
	if testing.Short() {
		t.Skip("starts a control plane and the whole stack")
	}
	cp := kubeharness.Start(t, o.kube...)
	env := eventstest.Start(t, service.NewRegistry())
	s := &stack{t: t, root: t, env: env, cp: cp, ctx: events.WithActor(context.Background(), testActor), logs: &eventstest.SyncBuffer{},
		appliedAt: map[string]time.Time{}}
	s.nc = s.conn()
	s.reg = regapi.Client{NC: s.nc}
	s.api = api.Client{NC: s.nc}

	ready := make(chan *regservice.Service, 1)
	s.run("registry", func(ctx context.Context) error {
		return regservice.Start(ctx, regservice.Config{Config: svc.Config{Service: "registry", StreamReplicas: 1}, OfflineAfter: o.offlineAfter,
			EnrollmentRate: o.enrollmentRate, EnrollmentBurst: o.enrollmentBurst},
			svc.Options{Conn: s.conn(), Logger: s.logger("registry")}, regservice.Hooks{Ready: ready})
	}, func() { s.regs = <-ready })

	bready := make(chan *bootservice.Service, 1)
	// The simulator's assets for the catalog (and for the patch release
	// platform_test.go adds to it): the revisions service checks a
	// revision's files with the boot service before saving it.
	assets, err := simassets.Dir(t.TempDir(), k8sVersions, platformPatch)
	if err != nil {
		t.Fatal(err)
	}
	bcfg := bootservice.Config{Config: svc.Config{Service: bootservice.Name}, Listen: "127.0.0.1:0", SigningKeys: signingKey,
		RetryInitial: 200 * time.Millisecond, RetryMax: time.Second, AssetBaseURL: "http://mirror.test/flatcar", AssetsDir: assets}
	var boot *bootservice.Service
	s.fleetNet = sim.NewMemNetwork()
	t.Cleanup(func() { _ = s.fleetNet.Close() })
	s.run("boot", func(ctx context.Context) error {
		return bootservice.Start(ctx, bcfg, svc.Options{Conn: s.conn(), Logger: s.logger("boot")},
			bootservice.Hooks{Ready: bready, Listeners: []net.Listener{s.fleetNet.Listener()}})
	}, func() { boot = <-bready })
	s.url = "http://" + boot.Addr

	rcfg := revservice.Config{Config: svc.Config{Service: revservice.Name, StreamReplicas: 1},
		EncryptionKeys: encryptionKey, KubernetesVersions: k8sVersions, BootURL: s.url}
	s.run("revisions", func(ctx context.Context) error {
		return revservice.Run(ctx, rcfg, svc.Options{Conn: s.conn(), Logger: s.logger("revisions")})
	}, func() {
		s.eventually("revisions answers", 30*time.Second, func() (bool, string) {
			_, err := revapi.ListCatalog(s.ctx, s.nc, revapi.ListCatalogRequest{Org: "acme"})
			return err == nil, fmt.Sprint(err)
		})
	})

	if o.leaseTTL == 0 {
		o.leaseTTL = 3 * time.Second
	}
	s.rolloutCfg = service.Config{Config: svc.Config{Service: service.Name, StreamReplicas: 1},
		Instance: "test", LeaseTTL: o.leaseTTL, Poll: 500 * time.Millisecond, Replan: 5 * time.Second,
		KubeQPS: o.kubeQPS, KubeBurst: o.kubeBurst}
	s.startRollout()
	t.Cleanup(func() {
		switch {
		case !t.Failed():
		case os.Getenv("ANVIL_TEST_LOGS") != "":
			t.Logf("service logs:\n%s", s.logs.String())
		default:
			t.Logf("the services' last warnings and errors (ANVIL_TEST_LOGS=1 prints every line):\n%s", warnings(s.logs.String(), 60))
		}
	})
	return s
}

// warnings returns the last n lines of JSON logs at level WARN or ERROR:
// a failure in CI says what went wrong in anvil without the whole log.
func warnings(logs string, n int) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func (s *stack) logger(name string) *slog.Logger {
	h := slog.Handler(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if live := os.Getenv("ANVIL_TEST_WARNINGS"); live != "" {
		// A long run (the 10,000-machine benchmark) shows its warnings as
		// they happen, not only when it ends.
		h = slog.NewMultiHandler(h, slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(h).With("svc", name)
}

// startRollout starts (or restarts) the rollout service.
func (s *stack) startRollout() {
	s.t.Helper()
	ready := make(chan *service.Service, 1)
	var svcRef *service.Service
	stop := s.run("rollout", func(ctx context.Context) error {
		return service.Start(ctx, s.rolloutCfg, svc.Options{Conn: s.conn(), Logger: s.logger("rollout")}, service.Hooks{Ready: ready})
	}, func() { svcRef = <-ready })
	s.mu.Lock()
	s.rollout, s.stopRoll = svcRef, stop
	s.mu.Unlock()
}

// startReplica starts another replica of the rollout service, with its
// own instance name, and returns it and its stop function.
func (s *stack) startReplica(instance string) (*service.Service, func()) {
	s.t.Helper()
	cfg := s.rolloutCfg
	cfg.Instance = instance
	ready := make(chan *service.Service, 1)
	var svcRef *service.Service
	stop := s.run("rollout "+instance, func(ctx context.Context) error {
		return service.Start(ctx, cfg, svc.Options{Conn: s.conn(), Logger: s.logger("rollout-" + instance)}, service.Hooks{Ready: ready})
	}, func() { svcRef = <-ready })
	return svcRef, stop
}

// killRollout stops the rollout service at once (its context is
// cancelled, as a SIGTERM would).
func (s *stack) killRollout() {
	s.mu.Lock()
	stop := s.stopRoll
	s.mu.Unlock()
	stop()
}

// run starts a service in the background, waits with ready, and returns
// its stop function (also run at cleanup).
func (s *stack) run(name string, fn func(context.Context) error, ready func()) func() {
	s.t.Helper()
	return eventstest.RunService(s.root, name, fn, ready,
		eventstest.RunOptions{StartTimeout: 90 * time.Second, StopTimeout: 60 * time.Second, Logs: s.logs})
}

func (s *stack) current() *service.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rollout
}

func (s *stack) conn() *nats.Conn {
	s.t.Helper()
	return s.env.Connect(s.root)
}

// eventually polls cond until it holds or the deadline passes.
func (s *stack) eventually(what string, d time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	eventstest.Eventually(s.t, what, d, 50*time.Millisecond, cond)
}

// org creates an organization and returns an enrollment token.
func (s *stack) org(id string) string {
	s.t.Helper()
	o, err := s.reg.CreateOrg(s.ctx, regapi.OrgCreate{ID: id, DisplayName: "Org " + id})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.regs.Orgs.WaitFor(s.ctx, o.Version); err != nil {
		s.t.Fatal(err)
	}
	tok, err := s.reg.IssueToken(s.ctx, regapi.TokenIssue{Org: id, Kind: regapi.KindEnrollment, Name: "rack-1"})
	if err != nil {
		s.t.Fatal(err)
	}
	envs, err := s.env.Store.Load(s.ctx, events.AggregateRef{Org: id, Type: "org", ID: id})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.regs.Orgs.WaitFor(s.ctx, events.Version(envs)); err != nil {
		s.t.Fatal(err)
	}
	return tok.Token
}

// cluster registers the harness's control plane as a cluster of org, with
// its admin kubeconfig as the rollout's credentials.
func (s *stack) cluster(org, name string) {
	s.t.Helper()
	_, err := revapi.CreateCluster(s.ctx, s.nc, revapi.CreateClusterRequest{
		Org: org, Name: name, APIEndpoint: s.cp.RESTConfig().Host, KubernetesVersion: "1.37.1",
		Kubeconfig: revapi.Secret(s.cp.Kubeconfig), BootstrapToken: "abcdef.0123456789abcdef",
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// fleetFor starts a simulated fleet that enrolls with token.
func (s *stack) fleetFor(token string, mut func(*sim.Config)) *sim.Fleet {
	s.t.Helper()
	cfg := sim.Config{
		BootURL: s.url, EnrollmentToken: token, Kube: s.cp.Client, MaxWait: 200 * time.Millisecond,
		AgentIntervals: sim.TestIntervals(), Logger: s.logger("sim"), StateDir: s.t.TempDir(),
	}
	if mut != nil {
		mut(&cfg)
	}
	f, err := sim.New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := f.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(f.Stop)
	return f
}

// poolSpec is a pool whose revision changes with gen (a node label).
func poolSpec(gen string, r revapi.Rollout) revapi.PoolSpec {
	return revapi.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  revapi.Kubernetes{Minor: "1.37"},
		Flatcar:     revapi.Flatcar{Channel: "stable", Version: "4230.2.3"},
		NodeLabels:  map[string]string{"anvil.dev/gen": gen},
		Rollout:     r,
	}
}

// machines pre-registers n machines of pool (hostnames <pool>-mNN) and
// adds them to fleet.
func (s *stack) machines(org, pool string, fleet *sim.Fleet, n int) []*sim.Machine {
	s.t.Helper()
	var out []*sim.Machine
	for i := 1; i <= n; i++ {
		h := fnv.New32a()
		_, _ = h.Write([]byte(org + "/" + pool))
		uuid := fmt.Sprintf("%08x-0000-4000-8000-%012x", h.Sum32(), i)
		host := fmt.Sprintf("%s-m%02d", pool, i)
		var r regapi.MachineReply
		// As a client would: a registry busy with the firmware of the
		// machines already added says when to try again.
		err := s.whileUnavailable("preregister "+host, func() (err error) {
			r, err = s.reg.Machine(s.ctx, org, uuid, regapi.PreRegister{UUID: uuid, Hostname: host, Pool: pool}, 0)
			return err
		})
		if err != nil {
			s.t.Fatalf("preregister %s: %v", host, err)
		}
		if err := s.regs.Machines.WaitFor(s.ctx, r.Version); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, fleet.Add(uuid, fmt.Sprintf("52:54:00:%02x:%02x:%02x", len(pool), i/256, i%256)))
	}
	return out
}

// createPool creates the pool with Save & Apply and waits for its first
// rollout (which provisions the machines) to succeed; it returns that
// rollout.
func (s *stack) createPool(org, pool, cluster string, spec revapi.PoolSpec) api.Rollout {
	s.t.Helper()
	return s.createPoolWithin(org, pool, cluster, spec, 2*time.Minute)
}

// createPoolWithin is createPool for fleets that need more than two
// minutes to boot, and as long again to provision.
func (s *stack) createPoolWithin(org, pool, cluster string, spec revapi.PoolSpec, within time.Duration) api.Rollout {
	s.t.Helper()
	s.eventually("every machine of "+pool+" booted and registered", within, func() (bool, string) {
		for host, m := range s.registryMachines(org, pool) {
			if m.Status != "pending" {
				return false, host + " is " + string(m.Status)
			}
		}
		return true, ""
	})
	s.markApply(pool)
	req := revapi.NewCreatePoolRequest(org, pool, cluster, spec)
	req.Apply = true
	if _, err := revapi.CreatePool(s.ctx, s.nc, req); err != nil {
		s.t.Fatal(err)
	}
	return s.waitRollout(org, pool, 1, max(within, 5*time.Minute), api.StatusSucceeded)
}

// apply saves spec as the pool's next revision with Save & Apply and
// returns the new revision's number.
func (s *stack) apply(org, pool string, spec revapi.PoolSpec) int {
	s.t.Helper()
	s.markApply(pool)
	req := revapi.NewUpdatePoolRequest(org, pool, spec)
	req.Apply = true
	c, err := revapi.UpdatePool(s.ctx, s.nc, req)
	if err != nil || c.ApplyRequested == 0 {
		s.t.Fatalf("update pool: %+v %v", c, err)
	}
	return c.ApplyRequested
}

// applyRevision re-applies an existing revision (a rollback or a re-apply).
func (s *stack) applyRevision(org, pool string, rev int) {
	s.t.Helper()
	s.markApply(pool)
	if _, err := revapi.ApplyRevision(s.ctx, s.nc, revapi.ApplyRevisionRequest{Org: org, Pool: pool, Revision: rev}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) markApply(pool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appliedAt[pool] = time.Now()
}

// findRollout returns the newest rollout of pool to revision that started
// after the pool's last apply.
func (s *stack) findRollout(org, pool string, revision uint64) (api.Rollout, bool) {
	s.mu.Lock()
	since := s.appliedAt[pool]
	s.mu.Unlock()
	list, err := s.api.List(s.ctx, api.ListRequest{Org: org, Pool: pool, Limit: 500})
	if err != nil {
		return api.Rollout{}, false
	}
	for _, r := range list.Items {
		if r.Revision == revision && !r.StartedAt.Before(since) {
			return r, true
		}
	}
	return api.Rollout{}, false
}

// waitRollout waits until the newest rollout of pool to revision has one
// of the statuses, and returns it with its machines and log.
func (s *stack) waitRollout(org, pool string, revision uint64, d time.Duration, want ...api.Status) api.Rollout {
	s.t.Helper()
	var id string
	s.eventually(fmt.Sprintf("rollout of %s to revision %d is %v", pool, revision, want), d, func() (bool, string) {
		r, ok := s.findRollout(org, pool, revision)
		if !ok {
			return false, "no rollout yet"
		}
		id = r.ID
		for _, w := range want {
			if r.Status == w && !r.Aborting {
				return true, ""
			}
		}
		status := string(r.Status)
		if r.Aborting {
			status += ", aborting"
		}
		return false, fmt.Sprintf("%s %s (%s) %s", r.ID, status, r.Progress, r.Reason)
	})
	return s.get(org, id)
}

func (s *stack) get(org, id string) api.Rollout {
	s.t.Helper()
	var r api.Rollout
	err := s.whileUnavailable("get rollout "+id, func() (err error) {
		r, err = s.api.Get(s.ctx, api.GetRequest{Org: org, ID: id})
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// whileUnavailable calls fn again, for up to a minute, while it fails as
// unavailable (a service busy or slow to answer on a loaded machine says
// to try again), as a client would; it returns fn's last error.
func (s *stack) whileUnavailable(what string, fn func() error) error {
	s.t.Helper()
	var err error
	s.eventually(what, time.Minute, func() (bool, string) {
		err = fn()
		return !errs.Is(err, errs.KindUnavailable), fmt.Sprint(err)
	})
	return err
}

// log reads the whole operation log of a rollout.
func (s *stack) log(org, id string) []string {
	s.t.Helper()
	var out []string
	after := 0
	for {
		var p api.LogPage
		err := s.whileUnavailable("read the log of rollout "+id, func() (err error) {
			p, err = s.api.Log(s.ctx, api.LogRequest{Org: org, ID: id, After: after})
			return err
		})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, e := range p.Entries {
			out = append(out, e.String())
		}
		if len(p.Entries) == 0 {
			return out
		}
		after = p.Next
	}
}

// nodeWatch records, from a watch of the cluster's nodes, the most nodes
// of a pool that were unschedulable at once.
type nodeWatch struct {
	mu      sync.Mutex
	cordons map[string]bool
	max     int
	stop    func()
}

func (s *stack) watchNodes(prefix string) *nodeWatch {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.cp.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	nw := &nodeWatch{cordons: map[string]bool{}, stop: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || !strings.HasPrefix(n.Name, prefix) {
				continue
			}
			nw.mu.Lock()
			nw.cordons[n.Name] = n.Spec.Unschedulable
			c := 0
			for _, v := range nw.cordons {
				if v {
					c++
				}
			}
			nw.max = max(nw.max, c)
			nw.mu.Unlock()
		}
	}()
	s.t.Cleanup(func() { cancel(); <-done })
	return nw
}

func (nw *nodeWatch) maxCordoned() int {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.max
}

// cordoned lists the pool's nodes that are unschedulable now.
func (s *stack) cordoned(prefix string) []string {
	s.t.Helper()
	list, err := s.cp.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) && n.Spec.Unschedulable {
			out = append(out, n.Name)
		}
	}
	return out
}

// mislabelled lists the nodes whose name starts with prefix and whose label
// key is not value: the rollout puts each revision's labels on the node.
func (s *stack) mislabelled(prefix, key, value string) []string {
	s.t.Helper()
	list, err := s.cp.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) && n.Labels[key] != value {
			out = append(out, n.Name+"="+n.Labels[key])
		}
	}
	return out
}

// registryMachines maps each machine's hostname to its registry status and
// current revision (every page).
func (s *stack) registryMachines(org, pool string) map[string]regapi.Machine {
	s.t.Helper()
	out := map[string]regapi.Machine{}
	cursor := ""
	for {
		page, err := s.reg.ListMachines(s.ctx, regapi.MachineList{Org: org, Pool: pool, Limit: 500, Cursor: cursor})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, m := range page.Items {
			out[m.Hostname] = m
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// setMinAvailable changes a PodDisruptionBudget and waits until the
// disruption controller has computed it.
func (s *stack) setMinAvailable(ns, name string, n int32) error {
	// The disruption controller writes the budget's status meanwhile: a
	// conflict is read again and retried.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b, err := s.cp.Client.PolicyV1().PodDisruptionBudgets(ns).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v := intstr.FromInt32(n)
		b.Spec.MinAvailable = &v
		_, err = s.cp.Client.PolicyV1().PodDisruptionBudgets(ns).Update(s.ctx, b, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	_, err = s.cp.WaitPDBComputed(s.ctx, ns, name)
	return err
}

// instructionsOf counts the distinct reboot instruction ids per machine
// that rollout id put in the log.
func (s *stack) instructionsOf(org, id string) (map[string]int, error) {
	ids := map[string]map[string]bool{}
	err := s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "rollout", AggregateID: id, EventTypes: []string{bootapi.EventTypeRebootRequested}},
		events.Position{}, events.Position{}, func(env *events.Envelope) error {
			var p bootapi.RebootRequested
			if err := json.Unmarshal(env.Payload, &p); err != nil {
				return err
			}
			if ids[p.UUID] == nil {
				ids[p.UUID] = map[string]bool{}
			}
			ids[p.UUID][p.InstructionID] = true
			return nil
		})
	out := map[string]int{}
	for u, set := range ids {
		out[u] = len(set)
	}
	return out, err
}

// registryAll waits until every machine of pool has status at revision in
// the registry (it hears about a rollout from its events, a moment later).
func (s *stack) registryAll(org, pool, status string, revision uint64) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("every machine of %s %s at revision %d", pool, status, revision), time.Minute, func() (bool, string) {
		for host, m := range s.registryMachines(org, pool) {
			if string(m.Status) != status || m.CurrentRevision != revision {
				return false, fmt.Sprintf("%s: %s at revision %d", host, m.Status, m.CurrentRevision)
			}
		}
		return true, ""
	})
}
