package story

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	"github.com/anvil-fleet/anvil/sim"
)

// Options are the story's parameters.
type Options struct {
	Org, Cluster, Pool string // defaults acme, prod, workers
	Preregistered      int    // machines pre-registered before they boot (both 0: 5 and 20)
	Booted             int    // machines that boot and register themselves
	FromMinor, ToMinor string // the pool's Kubernetes minor before and after (default 1.36, 1.37)
	MaxUnavailable     string // default "3"
	NodeReadyTimeout   string // default "3m"
	// Remediation is the pool's rollout.remediation.max_in_flight (0:
	// off); nil leaves it to the rollout service's default.
	Remediation *int
	// UUIDPrefix makes the fleet's UUIDs (default from Org).
	UUIDPrefix string
	// Sim tunes the fleet (BootURL, EnrollmentToken and Kube are set by the
	// story); nil fields keep the story's defaults.
	Sim func(*sim.Config)
	// SimLogger receives the simulator's logs (nil: discarded).
	SimLogger *slog.Logger
	// StateDir is where the simulated machines keep their state (empty: a
	// temporary directory).
	StateDir string
}

func (o *Options) defaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.Org, "acme")
	def(&o.Cluster, "prod")
	def(&o.Pool, "workers")
	def(&o.FromMinor, "1.36")
	def(&o.ToMinor, "1.37")
	def(&o.MaxUnavailable, "3")
	def(&o.NodeReadyTimeout, "3m")
	def(&o.UUIDPrefix, o.Org)
	if o.Preregistered == 0 && o.Booted == 0 {
		o.Preregistered, o.Booted = 5, 20
	}
}

// Story is the seed story's state: who did what so far.
type Story struct {
	Env  *Env
	Opts Options
	// API is a client of the organization with its admin token, Viewer
	// one with its viewer token (CreateOrg makes both).
	API, Viewer *client.Client
	Tokens      map[string]string // role → token; "enrollment" too
	Fleet       *sim.Fleet
	Pre, Booted []*sim.Machine // the pre-registered and the self-registered machines

	mu        sync.Mutex
	appliedAt time.Time
}

// New returns a story told against env.
func New(env *Env, o Options) *Story {
	o.defaults()
	return &Story{Env: env, Opts: o, Tokens: map[string]string{}}
}

// CreateOrg creates the organization with the bootstrap admin token, then
// an admin and a viewer API token and an enrollment token for the
// machines.
func (s *Story) CreateOrg(ctx context.Context) error {
	admin, err := s.Env.Client(s.Env.AdminToken, s.Opts.Org)
	if err != nil {
		return err
	}
	err = Retry(ctx, func() error {
		_, err := admin.CreateOrg(ctx, client.OrgCreate{ID: s.Opts.Org, DisplayName: strings.ToUpper(s.Opts.Org[:1]) + s.Opts.Org[1:]})
		return err
	})
	if err != nil && !client.IsConflict(err) {
		return err
	}
	for _, role := range []client.Role{client.RoleAdmin, client.RoleViewer} {
		// the org's projection follows the log: its tokens route may 404 a moment
		tok, err := retryValue(ctx, func() (*client.TokenIssued, error) {
			return admin.CreateToken(ctx, client.TokenCreate{Name: "demo-" + string(role), Role: role})
		}, 503, 404)
		if err != nil {
			return fmt.Errorf("issuing the %s token: %w", role, err)
		}
		s.Tokens[string(role)] = tok.Token
	}
	tok, err := retryValue(ctx, func() (*client.TokenIssued, error) {
		return admin.CreateEnrollmentToken(ctx, client.EnrollmentTokenCreate{Name: "rack-1"})
	}, 503, 404)
	if err != nil {
		return fmt.Errorf("issuing the enrollment token: %w", err)
	}
	s.Tokens["enrollment"] = tok.Token
	if s.API, err = s.Env.Client(s.Tokens["admin"], s.Opts.Org); err != nil {
		return err
	}
	if s.Viewer, err = s.Env.Client(s.Tokens["viewer"], s.Opts.Org); err != nil {
		return err
	}
	// the new tokens are verified through the registry's projection
	return Retry(ctx, func() error { _, err := s.API.GetOrg(ctx); return err }, 503, 401, 404)
}

// CreateCluster registers the harness's control plane as the cluster, with
// its admin kubeconfig as the rollout's credentials.
func (s *Story) CreateCluster(ctx context.Context) error {
	cp := s.Env.Kube
	cl := client.ClusterCreate{
		Name: s.Opts.Cluster, APIEndpoint: cp.RESTConfig().Host, KubernetesVersion: "1.37.1",
		Kubeconfig: string(cp.Kubeconfig), BootstrapToken: "abcdef.0123456789abcdef",
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
	}
	return Retry(ctx, func() error { _, err := s.API.CreateCluster(ctx, cl); return err })
}

// Spec is the story's pool at a Kubernetes minor.
func (s *Story) Spec(minor string) client.PoolSpec {
	return client.PoolSpec{
		DisplayName: "Workers",
		PoolConfig: client.PoolConfig{
			Kubernetes: client.Kubernetes{Minor: minor},
			Flatcar:    client.Flatcar{Channel: "stable", Version: "4230.2.3"},
			NodeLabels: map[string]string{"anvil.dev/tier": "general"},
		},
		Rollout: client.PoolRollout{MaxUnavailable: client.IntOrPercent(s.Opts.MaxUnavailable), DrainTimeout: "2m",
			NodeReadyTimeout: s.Opts.NodeReadyTimeout, Remediation: s.remediation()},
	}
}

func (s *Story) remediation() *client.Remediation {
	if s.Opts.Remediation == nil {
		return nil
	}
	return &client.Remediation{MaxInFlight: *s.Opts.Remediation}
}

// CreatePool saves the pool ("Save": revision 1, not rolled out yet).
func (s *Story) CreatePool(ctx context.Context) (client.PoolChange, error) {
	return retryValue(ctx, func() (*client.PoolChange, error) {
		return s.API.CreatePool(ctx, client.PoolCreate{Name: s.Opts.Pool, Cluster: s.Opts.Cluster, PoolSpec: s.Spec(s.Opts.FromMinor)})
	})
}

// UUID is the i-th machine's UUID (1-based); pre-registered machines come
// first.
func (s *Story) UUID(i int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.Opts.UUIDPrefix))
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", h.Sum32(), i)
}

// Hostname is the i-th machine's hostname.
func (s *Story) Hostname(i int) string { return fmt.Sprintf("%s-%02d", s.Opts.Pool, i) }

// StartFleet creates the simulated fleet (not booted yet).
func (s *Story) StartFleet(ctx context.Context) error {
	cfg := sim.Config{
		BootURL: s.Env.BootURL, EnrollmentToken: s.Tokens["enrollment"], Kube: s.Env.Kube.Client,
		RebootTime: 2 * time.Second, RebootJitter: time.Second, MaxWait: 500 * time.Millisecond,
		AgentIntervals: sim.TestIntervals(), Seed: 1, StateDir: s.Opts.StateDir, Logger: s.Opts.SimLogger,
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Opts.Sim != nil {
		s.Opts.Sim(&cfg)
	}
	f, err := sim.New(cfg)
	if err != nil {
		return err
	}
	s.Fleet = f
	return f.Start(context.WithoutCancel(ctx))
}

func (s *Story) mac(i int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.Opts.UUIDPrefix))
	return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", byte(h.Sum32()), byte(h.Sum32()>>8), i/256, i%256)
}

// PreRegister registers the first Preregistered machines (UUID, hostname,
// pool) before they ever boot, then powers them on.
func (s *Story) PreRegister(ctx context.Context) error {
	for i := 1; i <= s.Opts.Preregistered; i++ {
		m := client.MachinePreregister{UUID: s.UUID(i), Hostname: s.Hostname(i), Pool: s.Opts.Pool,
			Labels: map[string]string{"rack": "r1"}}
		err := Retry(ctx, func() error { _, err := s.API.PreregisterMachine(ctx, m); return err })
		if err != nil && !client.IsConflict(err) {
			return err
		}
		s.Pre = append(s.Pre, s.Fleet.Add(s.UUID(i), s.mac(i)))
	}
	return nil
}

// Boot powers on Booted machines that nobody registered: they chain-load
// iPXE with the enrollment token and register themselves.
func (s *Story) Boot(ctx context.Context) {
	for i := s.Opts.Preregistered + 1; i <= s.Opts.Preregistered+s.Opts.Booted; i++ {
		s.Booted = append(s.Booted, s.Fleet.Add(s.UUID(i), s.mac(i)))
	}
}

// Machines lists the organization's machines (all pages), of one pool if
// pool is set.
func (s *Story) Machines(ctx context.Context, pool string) ([]client.Machine, error) {
	var out []client.Machine
	for m, err := range s.API.AllMachines(ctx, client.MachineFilter{Pool: pool, ListOptions: client.ListOptions{Limit: 500}}) {
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Counts counts machines by status.
func Counts(ms []client.Machine) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		out[string(m.Status)]++
	}
	return out
}

// FormatCounts prints counts sorted by name.
func FormatCounts(c map[string]int) string {
	var keys []string
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// WaitRegistered waits until every machine has registered: the
// pre-registered ones pending in the pool, the others ready_unassigned.
func (s *Story) WaitRegistered(ctx context.Context, progress func(map[string]int)) error {
	return Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		ms, err := s.Machines(ctx, "")
		if err != nil {
			return false, nil
		}
		c := Counts(ms)
		if progress != nil {
			progress(c)
		}
		return c[string(client.StatusPending)] == s.Opts.Preregistered && c[string(client.StatusReadyUnassigned)] == s.Opts.Booted, nil
	})
}

// Assign names each self-registered machine and assigns it to the pool.
func (s *Story) Assign(ctx context.Context) error {
	for i, m := range s.Booted {
		host := s.Hostname(s.Opts.Preregistered + 1 + i)
		labels := map[string]string{"rack": "r2"}
		if err := Retry(ctx, func() error {
			_, err := s.API.UpdateMachine(ctx, m.UUID(), client.MachinePatch{Hostname: &host, Labels: &labels})
			return err
		}); err != nil {
			return err
		}
		if err := Retry(ctx, func() error { _, err := s.API.AssignMachine(ctx, m.UUID(), s.Opts.Pool); return err }); err != nil {
			return err
		}
	}
	// every machine must be pending in the pool, with its hostname, before the apply
	return Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		ms, err := s.Machines(ctx, s.Opts.Pool)
		if err != nil {
			return false, nil
		}
		n := 0
		for _, m := range ms {
			if m.Status == client.StatusPending && m.Hostname != "" {
				n++
			}
		}
		return n == s.Opts.Preregistered+s.Opts.Booted, nil
	})
}

func (s *Story) markApply() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appliedAt = time.Now().Add(-time.Second) // the rollout's start is the event's time
	return s.appliedAt
}

// ApplyRevision rolls revision n of the pool out (the first apply
// provisions the pending machines; an older revision is a rollback) and
// returns the rollout it started.
func (s *Story) ApplyRevision(ctx context.Context, n int) (client.Rollout, error) {
	since := s.markApply()
	if err := Retry(ctx, func() error { _, err := s.API.ApplyPoolRevision(ctx, s.Opts.Pool, n); return err }); err != nil {
		return client.Rollout{}, err
	}
	return s.FindRollout(ctx, uint64(n), since)
}

// ChangeVersion changes the pool's Kubernetes minor with Save & Apply and
// returns the new revision and the rollout it started. opts go with the
// PUT (client.Header with a traceparent, say).
func (s *Story) ChangeVersion(ctx context.Context, minor string, opts ...client.CallOption) (int, client.Rollout, error) {
	since := s.markApply()
	c, err := s.API.UpdatePool(ctx, s.Opts.Pool, client.PoolUpdate{PoolSpec: s.Spec(minor), Apply: true}, opts...)
	if err != nil {
		return 0, client.Rollout{}, err
	}
	if c.ApplyRequested == 0 || c.RevisionCreated == 0 {
		return 0, client.Rollout{}, fmt.Errorf("save & apply made no revision or requested no apply: %+v", c)
	}
	r, err := s.FindRollout(ctx, uint64(c.ApplyRequested), since)
	return c.ApplyRequested, r, err
}

// FindRollout waits for the newest rollout of the pool to revision that
// started at or after since.
func (s *Story) FindRollout(ctx context.Context, revision uint64, since time.Time) (client.Rollout, error) {
	var found client.Rollout
	err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		list, err := s.API.ListRollouts(ctx, client.RolloutFilter{Pool: s.Opts.Pool, ListOptions: client.ListOptions{Limit: 100}})
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			if r.Revision == revision && !r.StartedAt.Before(since) {
				found = r
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

// Rollout reads one rollout with its machines and log.
func (s *Story) Rollout(ctx context.Context, id string) (client.Rollout, error) {
	return retryValue(ctx, func() (*client.Rollout, error) { return s.API.GetRollout(ctx, id) })
}

// Watch follows an operation's log live over Server-Sent Events until the
// operation ends (end event) or stop returns true for a status; it
// follows again from the next entry when the stream drops or the service
// does not answer (503). It returns the last status seen.
func (s *Story) Watch(ctx context.Context, id string, onEntry func(client.LogEntry), stop func(status string) bool) (string, error) {
	from, status := 0, ""
	for {
		var err error
		for ev, e := range s.Viewer.FollowOperationLog(ctx, id, from) {
			if e != nil {
				err = e
				break
			}
			switch ev.Kind {
			case client.LogEventEntry:
				if onEntry != nil {
					onEntry(ev.Entry)
				}
				from = ev.Index + 1
			case client.LogEventStatus, client.LogEventEnd:
				status = ev.Status
				if ev.Kind == client.LogEventEnd || stop != nil && stop(status) {
					return status, nil
				}
			}
		}
		if ctx.Err() != nil {
			return status, ctx.Err()
		}
		if err != nil && !client.IsUnavailable(err) {
			return status, err
		}
		select {
		case <-ctx.Done():
			return status, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitRolloutStatus waits until the rollout has one of the statuses (and
// is not aborting), reading it over the API.
func (s *Story) WaitRolloutStatus(ctx context.Context, id string, want ...client.RolloutStatus) (client.Rollout, error) {
	var r client.Rollout
	err := Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		if r, err = s.Rollout(ctx, id); err != nil {
			return false, nil
		}
		return slices.Contains(want, r.Status) && !r.Aborting, nil
	})
	if err != nil {
		return r, fmt.Errorf("rollout %s is %s (%s), not %v: %w", id, r.Status, r.Reason, want, err)
	}
	return r, nil
}

// Log reads an operation's whole log as JSON pages.
func (s *Story) Log(ctx context.Context, id string) ([]client.LogEntry, error) {
	var out []client.LogEntry
	after := 0
	for {
		page, err := retryValue(ctx, func() (*client.LogPage, error) { return s.Viewer.GetOperationLog(ctx, id, after, 0) })
		if err != nil {
			return nil, err
		}
		out = append(out, page.Entries...)
		if len(page.Entries) == 0 || page.Next <= after {
			return out, nil
		}
		after = page.Next
	}
}

// Events reads the audit log (all pages, 1000 events a page unless
// f.Limit says otherwise) that f selects.
func (s *Story) Events(ctx context.Context, f client.EventFilter) ([]client.Event, error) {
	var out []client.Event
	if f.Limit == 0 {
		f.Limit = 1000
	}
	for {
		page, err := retryValue(ctx, func() (*client.Page[client.Event], error) { return s.Viewer.ListEvents(ctx, f) })
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" || len(page.Items) == 0 {
			return out, nil
		}
		f.Cursor = page.Next
	}
}

// Workloads puts a Deployment on the pool's nodes with a
// PodDisruptionBudget that keeps most of it running, so that every drain
// goes through the Eviction API under the budget.
func (s *Story) Workloads(ctx context.Context) error {
	cp := s.Env.Kube
	if err := cp.CreateNamespace(ctx, "shop"); err != nil {
		return err
	}
	for _, w := range []struct {
		name     string
		replicas int32
		min      int32
	}{{"web", 6, 4}, {"cart", 3, 2}} {
		if _, err := cp.CreateDeployment(ctx, kubeharness.Deployment{Namespace: "shop", Name: w.name, Replicas: w.replicas,
			NodeSelector: map[string]string{"anvil.dev/tier": "general"}}); err != nil {
			return fmt.Errorf("deployment %s: %w", w.name, err)
		}
		minAvail := intstr.FromInt32(w.min)
		if _, err := cp.CreatePDB(ctx, kubeharness.PDB{Namespace: "shop", Name: w.name, Selector: map[string]string{"app": w.name},
			MinAvailable: &minAvail}); err != nil {
			return fmt.Errorf("budget %s: %w", w.name, err)
		}
	}
	return nil
}

// NodesReady counts the pool's Ready and unschedulable nodes.
func (s *Story) NodesReady(ctx context.Context) (ready, cordoned, total int, err error) {
	l, err := s.Env.Kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range l.Items {
		n := &l.Items[i]
		if !strings.HasPrefix(n.Name, s.Opts.Pool+"-") {
			continue
		}
		total++
		if kubeharness.NodeIsReady(n) {
			ready++
		}
		if n.Spec.Unschedulable {
			cordoned++
		}
	}
	return ready, cordoned, total, nil
}

// Poll calls cond every interval until it returns true or an error, or ctx
// ends.
func Poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
