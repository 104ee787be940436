package faults_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/sim"
)

const (
	fleetSize = 50
	org       = "faults"
	poolName  = "workers"
	clusterID = "c1"
	// maxUnavailable machines reboot at once: the rollout of 50 machines
	// takes long enough for each fault to land in its middle.
	maxUnavailable = "5"
)

var (
	encryptionKey = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	signingKey    = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func jsonDecode(r io.Reader, into any) error { return json.NewDecoder(r).Decode(into) }

// stack is the whole system under test.
type stack struct {
	t     *testing.T
	c     *cluster
	cp    *kubeharness.ControlPlane
	nc    *nats.Conn
	js    jetstream.JetStream
	reg   regapi.Client
	ro    api.Client
	ctx   context.Context
	fleet *sim.Fleet
	ms    []*sim.Machine
	gen   int // the pool's node label, changed by every apply

	mu        sync.Mutex
	appliedAt time.Time
}

func newStack(t *testing.T) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("fault tests skipped: -short (they start containers and a control plane)")
	}
	pool := dockerPool(t)
	root := repoRoot(t)
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	ensureImages(t, pool, root, version)

	begin := time.Now()
	s := &stack{t: t, ctx: events.WithActor(context.Background(), "token:faults (fault tests)")}
	s.c = newCluster(t, pool, version)

	// The control plane starts on the host while the containers start.
	type started struct {
		cp  *kubeharness.ControlPlane
		err error
	}
	kube := make(chan started, 1)
	kubeDir := t.TempDir()
	go func() {
		// The API server listens on every address, so that containers
		// reach it at the network's gateway; its certificate names
		// localhost, which the containers' kubeconfig asks for by name.
		cp, err := kubeharness.StartProcess(context.Background(), kubeDir,
			kubeharness.WithArgs(kubeharness.KubeAPIServer, "--bind-address=0.0.0.0"))
		kube <- started{cp, err}
	}()
	t.Cleanup(func() {
		if s.cp != nil {
			if err := s.cp.Stop(); err != nil {
				t.Errorf("stopping the control plane: %v", err)
			}
		}
	})

	s.c.startNATS()
	s.connect()
	s.waitJetStream()
	s.c.startServices(encryptionKey, signingKey)
	for name, n := range s.c.crashes() {
		if n > 0 {
			t.Logf("setup: %s exited on an error at start and was started again by Docker %d time(s)", name, n)
		}
	}

	k := <-kube
	if errors.Is(k.err, kubeharness.ErrBinariesMissing) && os.Getenv("ANVIL_SKIP_KUBE") != "" {
		t.Skipf("fault tests skipped (ANVIL_SKIP_KUBE): %v", oneLine(k.err.Error()))
	}
	if k.err != nil {
		t.Fatalf("starting the control plane: %v", k.err)
	}
	s.cp = k.cp
	t.Logf("setup: containers and control plane up in %s (network %s, host at %s)",
		time.Since(begin).Round(100*time.Millisecond), s.c.net.Network.Name, s.c.gateway)
	return s
}

// connect opens the test's own connection. It pings every second, so that
// it leaves a node cut off by a partition within seconds (the services keep
// nats.go's defaults).
func (s *stack) connect() {
	s.t.Helper()
	nc, err := nats.Connect(s.c.hostNATSURLs(), nats.Name("anvil-faults-test"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2),
		nats.RetryOnFailedConnect(true), nats.Timeout(2*time.Second))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	s.nc, s.js = nc, js
	s.reg = regapi.Client{NC: nc}
	s.ro = api.Client{NC: nc}
}

// waitJetStream waits until the cluster has a meta leader and answers
// JetStream requests.
func (s *stack) waitJetStream() {
	s.t.Helper()
	s.eventually("JetStream cluster answers", 90*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		defer cancel()
		_, err := s.js.AccountInfo(ctx)
		return err == nil, fmt.Sprint(err)
	})
}

// eventually polls cond until it holds or d passes (a deadline for
// waiting, not an assertion on how long anything takes).
func (s *stack) eventually(what string, d time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	s.eventuallyOr(what, d, cond, nil)
}

// eventuallyOr is eventually, telling more when cond does not hold in
// time: explain's account of the system (nil: nothing more).
func (s *stack) eventuallyOr(what string, d time.Duration, cond func() (bool, string), explain func() string) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			more := ""
			if explain != nil {
				more = "\n" + explain()
			}
			s.t.Fatalf("%s: not within %s; last state: %s%s", what, d, last, more)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// retry calls fn until it succeeds (a projection may not have seen an
// earlier write yet) or d passes.
func (s *stack) retry(what string, d time.Duration, fn func() error) {
	s.t.Helper()
	s.eventually(what, d, func() (bool, string) {
		err := fn()
		return err == nil, fmt.Sprint(err)
	})
}

// containerKubeconfig is the control plane's admin kubeconfig as the
// rollout service uses it from its container: the server at the network's
// gateway, with the serving certificate checked for "localhost" (a name it
// carries) against the harness's CA.
func (s *stack) containerKubeconfig() []byte {
	s.t.Helper()
	cfg, err := clientcmd.Load(s.cp.Kubeconfig)
	if err != nil {
		s.t.Fatal(err)
	}
	u, err := url.Parse(s.cp.RESTConfig().Host)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + s.c.gateway + ":" + u.Port()
		cl.TLSServerName = "localhost"
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// provision creates the organization, its enrollment token, the cluster,
// 50 pre-registered machines with the simulated fleet that boots them, and
// the pool, whose first rollout provisions the machines.
func (s *stack) provision() {
	s.t.Helper()
	begin := time.Now()
	// Every service said ready, but a subscription made through one NATS
	// server reaches the others' interest graphs a moment later: a request
	// sent through another server may find no responder yet. Creating the
	// organization again is a no-op, so the first command is retried.
	s.retry("create the organization", 30*time.Second, func() error {
		_, err := s.reg.CreateOrg(s.ctx, regapi.OrgCreate{ID: org, DisplayName: "Fault tests"})
		return err
	})
	var enroll string
	s.retry("issue an enrollment token", 30*time.Second, func() error {
		tok, err := s.reg.IssueToken(s.ctx, regapi.TokenIssue{Org: org, Kind: regapi.KindEnrollment, Name: "rack-1"})
		enroll = tok.Token
		return err
	})
	s.retry("register the cluster", 30*time.Second, func() error {
		_, err := revapi.CreateCluster(s.ctx, s.nc, revapi.CreateClusterRequest{
			Org: org, Name: clusterID, APIEndpoint: "https://" + s.c.gateway + ":6443", KubernetesVersion: "1.37.1",
			Kubeconfig: revapi.Secret(s.containerKubeconfig()), BootstrapToken: "abcdef.0123456789abcdef",
			CACertHash: "sha256:" + strings.Repeat("ab", 32),
		})
		return err
	})

	fleet, err := sim.New(sim.Config{
		BootURL: fmt.Sprintf("http://127.0.0.1:%d", s.c.bootPort), EnrollmentToken: enroll, Kube: s.cp.Client,
		RebootTime: 1500 * time.Millisecond, RebootJitter: 500 * time.Millisecond, MaxWait: 200 * time.Millisecond,
		AgentIntervals: sim.TestIntervals(), StateDir: s.t.TempDir(), Seed: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 1; i <= fleetSize; i++ {
		uuid := fmt.Sprintf("fa017000-0000-4000-8000-%012x", i)
		host := fmt.Sprintf("%s-m%02d", poolName, i)
		s.retry("pre-register "+host, 30*time.Second, func() error {
			_, err := s.reg.Machine(s.ctx, org, uuid, regapi.PreRegister{UUID: uuid, Hostname: host, Pool: poolName}, 0)
			if err != nil && strings.Contains(err.Error(), "exists") {
				return nil
			}
			return err
		})
		s.ms = append(s.ms, fleet.Add(uuid, fmt.Sprintf("52:54:00:fa:%02x:%02x", i/256, i%256)))
	}
	if err := fleet.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(fleet.Stop)
	s.fleet = fleet

	s.eventually("every machine booted and registered", 2*time.Minute, func() (bool, string) {
		ms, err := s.machines()
		if err != nil {
			return false, err.Error()
		}
		if len(ms) != fleetSize {
			return false, fmt.Sprintf("%d machines", len(ms))
		}
		for _, m := range ms {
			if m.Status != "pending" {
				return false, m.Hostname + " is " + string(m.Status)
			}
		}
		return true, ""
	})
	s.gen = 1
	s.markApply()
	req := revapi.NewCreatePoolRequest(org, poolName, clusterID, s.poolSpec())
	req.Apply = true
	s.retry("create the pool", 30*time.Second, func() error {
		_, err := revapi.CreatePool(s.ctx, s.nc, req)
		if err != nil && strings.Contains(err.Error(), "exists") {
			return nil
		}
		return err
	})
	r := s.waitRollout(1, 4*time.Minute)
	s.t.Logf("provisioned %d machines (first rollout %s) in %s", fleetSize, r.ID, time.Since(begin).Round(100*time.Millisecond))
}

func (s *stack) poolSpec() revapi.PoolSpec {
	return revapi.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  revapi.Kubernetes{Minor: "1.37"},
		Flatcar:     revapi.Flatcar{Channel: "stable", Version: "4230.2.3"},
		NodeLabels:  map[string]string{"anvil.dev/gen": fmt.Sprint(s.gen)},
		Rollout:     revapi.Rollout{MaxUnavailable: revapi.IntOrPercent(maxUnavailable), DrainTimeout: "2m", NodeReadyTimeout: "3m"},
	}
}

func (s *stack) markApply() {
	s.mu.Lock()
	s.appliedAt = time.Now()
	s.mu.Unlock()
}

// apply saves the pool's next revision with Save & Apply, which starts a
// rollout of every machine; it returns the revision.
func (s *stack) apply() uint64 {
	s.t.Helper()
	// The rollout's checks want every machine online (heartbeating) and
	// its node Ready; right after a rollout a machine's agent may not have
	// reported yet. A node that is not Ready here is logged with what its
	// condition says (who set it: the simulator's reboot, or the node
	// lifecycle controller missing kwok's lease), as it was the cause of a
	// rollout refused by its sanity checks in CI.
	waited := map[string]string{}
	s.eventually("every machine online and ready, every node Ready", time.Minute, func() (bool, string) {
		ms, err := s.machines()
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if m.Connectivity != regapi.Online || string(m.Status) != "ready" {
				return false, fmt.Sprintf("%s: %s, %q", m.Hostname, m.Status, m.Connectivity)
			}
		}
		if len(ms) != fleetSize {
			return false, fmt.Sprintf("%d machines", len(ms))
		}
		notReady, err := s.nodesNotReady()
		if err != nil {
			return false, err.Error()
		}
		for name, why := range notReady {
			if _, seen := waited[name]; !seen {
				waited[name] = why
			}
		}
		return len(notReady) == 0, fmt.Sprintf("nodes not Ready: %v", notReady)
	})
	if len(waited) > 0 {
		s.t.Logf("waited for nodes to turn Ready before applying: %v", waited)
	}
	s.gen++
	s.markApply()
	req := revapi.NewUpdatePoolRequest(org, poolName, s.poolSpec())
	req.Apply = true
	var rev int
	s.retry("apply a new revision", 30*time.Second, func() error {
		c, err := revapi.UpdatePool(s.ctx, s.nc, req)
		if err == nil && c.ApplyRequested == 0 {
			return fmt.Errorf("nothing applied: %+v", c)
		}
		rev = c.ApplyRequested
		return err
	})
	return uint64(rev)
}

// findRollout returns the rollout of the pool to revision that started
// after the last apply.
func (s *stack) findRollout(revision uint64) (api.Rollout, error) {
	s.mu.Lock()
	since := s.appliedAt.Add(-time.Minute) // clocks of host and containers are the same; a margin anyway
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	list, err := s.ro.List(ctx, api.ListRequest{Org: org, Pool: poolName, Limit: 500})
	if err != nil {
		return api.Rollout{}, err
	}
	for _, r := range list.Items {
		if r.Revision == revision && !r.StartedAt.Before(since) {
			return r, nil
		}
	}
	return api.Rollout{}, fmt.Errorf("no rollout to revision %d yet", revision)
}

// waitProgress waits until at least done machines of the rollout are done.
func (s *stack) waitProgress(revision uint64, done int) api.Rollout {
	s.t.Helper()
	var out api.Rollout
	s.eventually(fmt.Sprintf("rollout to revision %d has %d machines done", revision, done), 3*time.Minute, func() (bool, string) {
		r, err := s.findRollout(revision)
		if err != nil {
			return false, err.Error()
		}
		out = r
		if r.Status.Final() || r.Status == api.StatusFailed {
			notReady, err := s.nodesNotReady()
			s.t.Fatalf("rollout %s is %s before the fault (%s): %s\nnodes not Ready now: %v %v", r.ID, r.Status, r.Progress, r.Reason, notReady, err)
		}
		return r.Progress.Done >= done, fmt.Sprintf("%s %s (%s)", r.ID, r.Status, r.Progress)
	})
	return out
}

// waitRollout waits until the rollout to revision succeeded and returns it.
func (s *stack) waitRollout(revision uint64, d time.Duration) api.Rollout {
	s.t.Helper()
	var id string
	s.eventuallyOr(fmt.Sprintf("rollout to revision %d succeeded", revision), d, func() (bool, string) {
		r, err := s.findRollout(revision)
		if err != nil {
			return false, err.Error()
		}
		id = r.ID
		if r.Status == api.StatusFailed || r.Status == api.StatusAborted {
			s.t.Fatalf("rollout %s %s: %s", r.ID, r.Status, r.Reason)
		}
		return r.Status == api.StatusSucceeded && !r.Aborting, fmt.Sprintf("%s %s (%s) %s", r.ID, r.Status, r.Progress, r.Reason)
	}, func() string { return s.stuckRollout(id, revision) })
	var r api.Rollout
	s.retry("read rollout "+id, 30*time.Second, func() error {
		var err error
		r, err = s.ro.Get(s.ctx, api.GetRequest{Org: org, ID: id})
		return err
	})
	return r
}

// stuckRollout tells where a rollout that did not finish stands: the end
// of its log (what its driver last decided) and the machines that are not
// ready at its revision in the registry, with their status.
func (s *stack) stuckRollout(id string, revision uint64) string {
	var b strings.Builder
	if id != "" {
		if lines, err := s.rolloutLog(id); err != nil {
			fmt.Fprintf(&b, "reading the log of %s: %v\n", id, err)
		} else {
			fmt.Fprintf(&b, "the last %d of the %d entries in the log of %s:\n", min(len(lines), 30), len(lines), id)
			for _, l := range lines[max(len(lines)-30, 0):] {
				fmt.Fprintf(&b, "  %s\n", l)
			}
		}
	}
	ms, err := s.machines()
	if err != nil {
		fmt.Fprintf(&b, "listing the machines: %v", err)
		return b.String()
	}
	for _, m := range ms {
		if m.Status != regapi.StatusReady || m.CurrentRevision != revision {
			fmt.Fprintf(&b, "machine %s (%s): %s, %s, booted revision %d of target %d\n",
				m.Hostname, m.UUID, m.Status, m.Connectivity, m.CurrentRevision, m.TargetRevision)
		}
	}
	return b.String()
}

// rolloutLog reads a rollout's whole log.
func (s *stack) rolloutLog(id string) ([]string, error) {
	var out []string
	after := 0
	for {
		p, err := s.ro.Log(s.ctx, api.LogRequest{Org: org, ID: id, After: after})
		if err != nil {
			return nil, err
		}
		for _, e := range p.Entries {
			out = append(out, e.String())
		}
		if len(p.Entries) == 0 {
			return out, nil
		}
		after = p.Next
	}
}

// machines lists the pool's machines in the registry.
func (s *stack) machines() ([]regapi.Machine, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	page, err := s.reg.ListMachines(ctx, regapi.MachineList{Org: org, Pool: poolName, Limit: 500})
	return page.Items, err
}

// nodesNotReady names the nodes whose Ready condition is not True, with
// the condition's reason and message.
func (s *stack) nodesNotReady() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	nodes, err := s.cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		if kubeharness.NodeIsReady(&n) {
			continue
		}
		out[n.Name] = "no Ready condition"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				out[n.Name] = fmt.Sprintf("%s %s: %s (since %s)", c.Status, c.Reason, c.Message, c.LastTransitionTime.Format(time.TimeOnly))
			}
		}
	}
	return out, nil
}

// reboots counts each simulated machine's reboots so far.
func (s *stack) reboots() map[string]int {
	out := map[string]int{}
	for _, m := range s.ms {
		out[m.UUID()] = len(m.Reboots())
	}
	return out
}

// checkRollout checks a finished rollout: every machine done, each rebooted
// exactly once since before (the counts reboots returned before it
// started), one reboot step per machine in its log, every machine ready at
// the new revision in the registry and no node left cordoned.
func (s *stack) checkRollout(r api.Rollout, before map[string]int) {
	s.t.Helper()
	if r.Progress.Done != fleetSize {
		s.t.Errorf("rollout %s: progress %+v, want %d done", r.ID, r.Progress, fleetSize)
	}
	for _, m := range s.ms {
		if n := len(m.Reboots()) - before[m.UUID()]; n != 1 {
			s.t.Errorf("%s rebooted %d times during rollout %s, want exactly once", m.Hostname(), n, r.ID)
		}
	}
	lines, err := s.rolloutLog(r.ID)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, m := range s.ms {
		starts := 0
		for _, l := range lines {
			if strings.Contains(l, " "+m.Hostname()+" reboot started") {
				starts++
			}
		}
		if starts != 1 {
			s.t.Errorf("%s: %d reboot steps started in the log of %s, want 1", m.Hostname(), starts, r.ID)
		}
	}
	s.eventually("every machine ready at the new revision in the registry", time.Minute, func() (bool, string) {
		ms, err := s.machines()
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if string(m.Status) != "ready" || m.CurrentRevision != r.Revision {
				return false, fmt.Sprintf("%s: %s at revision %d", m.Hostname, m.Status, m.CurrentRevision)
			}
		}
		return true, ""
	})
	nodes, err := s.cp.Client.CoreV1().Nodes().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			s.t.Errorf("node %s left cordoned", n.Name)
		}
	}
}
