package story

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
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
	// API is the organization's admin token's client; Operator and Viewer
	// the other roles'.
	API, Viewer *Client
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

func (s *Story) orgPath(format string, args ...any) string {
	if len(args) == 0 {
		return "/api/v1/orgs/" + s.Opts.Org + format
	}
	return "/api/v1/orgs/" + s.Opts.Org + fmt.Sprintf(format, args...)
}

// Path is a path under /api/v1/orgs/<org>.
func (s *Story) Path(p string) string { return "/api/v1/orgs/" + s.Opts.Org + p }

// CreateOrg creates the organization with the bootstrap admin token, then
// an admin and a viewer API token and an enrollment token for the
// machines.
func (s *Story) CreateOrg(ctx context.Context) error {
	admin := s.Env.Admin()
	err := admin.Retry(ctx, "POST", "/api/v1/orgs", map[string]string{"id": s.Opts.Org, "display_name": strings.ToUpper(s.Opts.Org[:1]) + s.Opts.Org[1:]}, nil)
	if err != nil && StatusOf(err) != 409 {
		return err
	}
	for _, role := range []string{"admin", "viewer"} {
		var tok struct{ Token string }
		// the org's projection follows the log: its tokens route may 404 a moment
		if err := admin.Retry(ctx, "POST", s.orgPath("/tokens"), map[string]string{"name": "demo-" + role, "role": role}, &tok, 503, 404); err != nil {
			return fmt.Errorf("issuing the %s token: %w", role, err)
		}
		s.Tokens[role] = tok.Token
	}
	var tok struct{ Token string }
	if err := admin.Retry(ctx, "POST", s.orgPath("/enrollment-tokens"), map[string]string{"name": "rack-1"}, &tok, 503, 404); err != nil {
		return fmt.Errorf("issuing the enrollment token: %w", err)
	}
	s.Tokens["enrollment"] = tok.Token
	s.API = &Client{Base: s.Env.GatewayURL, Token: s.Tokens["admin"]}
	s.Viewer = &Client{Base: s.Env.GatewayURL, Token: s.Tokens["viewer"]}
	// the new tokens are verified through the registry's projection
	return s.API.Retry(ctx, "GET", s.orgPath(""), nil, nil, 503, 401, 404)
}

// CreateCluster registers the harness's control plane as the cluster, with
// its admin kubeconfig as the rollout's credentials.
func (s *Story) CreateCluster(ctx context.Context) error {
	cp := s.Env.Kube
	body := map[string]any{
		"name": s.Opts.Cluster, "api_endpoint": cp.RESTConfig().Host, "kubernetes_version": "1.37.1",
		"kubeconfig": string(cp.Kubeconfig), "bootstrap_token": "abcdef.0123456789abcdef",
		"ca_cert_hash": "sha256:" + strings.Repeat("ab", 32),
	}
	return s.API.Retry(ctx, "POST", s.orgPath("/clusters"), body, nil)
}

// PoolBody is the body of a pool's POST or PUT.
type PoolBody struct {
	Name    string `json:"name,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	revapi.PoolSpec
	Apply bool `json:"apply,omitempty"`
}

// Spec is the story's pool at a Kubernetes minor.
func (s *Story) Spec(minor string) revapi.PoolSpec {
	return revapi.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  revapi.Kubernetes{Minor: minor},
		Flatcar:     revapi.Flatcar{Channel: "stable", Version: "4230.2.3"},
		NodeLabels:  map[string]string{"anvil.dev/tier": "general"},
		Rollout: revapi.Rollout{MaxUnavailable: revapi.IntOrPercent(s.Opts.MaxUnavailable), DrainTimeout: "2m",
			NodeReadyTimeout: s.Opts.NodeReadyTimeout, Remediation: s.remediation()},
	}
}

func (s *Story) remediation() *revapi.Remediation {
	if s.Opts.Remediation == nil {
		return nil
	}
	return &revapi.Remediation{MaxInFlight: *s.Opts.Remediation}
}

// CreatePool saves the pool ("Save": revision 1, not rolled out yet).
func (s *Story) CreatePool(ctx context.Context) (revapi.PoolChange, error) {
	var c revapi.PoolChange
	err := s.API.Retry(ctx, "POST", s.orgPath("/pools"), PoolBody{Name: s.Opts.Pool, Cluster: s.Opts.Cluster, PoolSpec: s.Spec(s.Opts.FromMinor)}, &c)
	return c, err
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
		body := map[string]any{"uuid": s.UUID(i), "hostname": s.Hostname(i), "pool": s.Opts.Pool,
			"labels": map[string]string{"rack": "r1"}}
		if err := s.API.Retry(ctx, "POST", s.orgPath("/machines"), body, nil); err != nil && StatusOf(err) != 409 {
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

// Machines lists the organization's machines (all pages).
func (s *Story) Machines(ctx context.Context, pool string) ([]regapi.Machine, error) {
	var out []regapi.Machine
	cursor := ""
	for {
		var page struct {
			Items []regapi.Machine `json:"items"`
			Next  string           `json:"next"`
		}
		if err := s.API.Do(ctx, "GET", s.Path("/machines"+q("pool", pool, "cursor", cursor, "limit", "500")), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
}

// Counts counts machines by status.
func Counts(ms []regapi.Machine) map[string]int {
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
		return c["pending"] == s.Opts.Preregistered && c["ready_unassigned"] == s.Opts.Booted, nil
	})
}

// Assign names each self-registered machine and assigns it to the pool.
func (s *Story) Assign(ctx context.Context) error {
	for i, m := range s.Booted {
		host := s.Hostname(s.Opts.Preregistered + 1 + i)
		path := s.orgPath("/machines/%s", m.UUID())
		if err := s.API.Retry(ctx, "PATCH", path, map[string]any{"hostname": host, "labels": map[string]string{"rack": "r2"}}, nil); err != nil {
			return err
		}
		if err := s.API.Retry(ctx, "POST", path+"/assign", map[string]string{"pool": s.Opts.Pool}, nil); err != nil {
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
			if m.Status == "pending" && m.Hostname != "" {
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
func (s *Story) ApplyRevision(ctx context.Context, n int) (rolloutapi.Rollout, error) {
	since := s.markApply()
	var c revapi.PoolChange
	if err := s.API.Retry(ctx, "POST", s.orgPath("/pools/%s/revisions/%d/apply", s.Opts.Pool, n), nil, &c); err != nil {
		return rolloutapi.Rollout{}, err
	}
	return s.FindRollout(ctx, uint64(n), since)
}

// ChangeVersion changes the pool's Kubernetes minor with Save & Apply and
// returns the new revision and the rollout it started.
func (s *Story) ChangeVersion(ctx context.Context, minor string) (int, rolloutapi.Rollout, error) {
	since := s.markApply()
	var c revapi.PoolChange
	if err := s.API.Do(ctx, "PUT", s.orgPath("/pools/%s", s.Opts.Pool), PoolBody{PoolSpec: s.Spec(minor), Apply: true}, &c); err != nil {
		return 0, rolloutapi.Rollout{}, err
	}
	if c.ApplyRequested == 0 || c.RevisionCreated == 0 {
		return 0, rolloutapi.Rollout{}, fmt.Errorf("save & apply made no revision or requested no apply: %+v", c)
	}
	r, err := s.FindRollout(ctx, uint64(c.ApplyRequested), since)
	return c.ApplyRequested, r, err
}

// FindRollout waits for the newest rollout of the pool to revision that
// started at or after since.
func (s *Story) FindRollout(ctx context.Context, revision uint64, since time.Time) (rolloutapi.Rollout, error) {
	var found rolloutapi.Rollout
	err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var list rolloutapi.RolloutList
		if err := s.API.Do(ctx, "GET", s.Path("/rollouts"+q("pool", s.Opts.Pool, "limit", "100")), nil, &list); err != nil {
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
func (s *Story) Rollout(ctx context.Context, id string) (rolloutapi.Rollout, error) {
	var r rolloutapi.Rollout
	err := s.API.Retry(ctx, "GET", s.orgPath("/rollouts/%s", id), nil, &r)
	return r, err
}

// Status is an SSE status event's data.
type Status struct {
	Status string `json:"status"`
	Next   int    `json:"next"`
}

// Watch follows an operation's log live over Server-Sent Events until the
// operation ends (end event) or stop returns true for a status; it
// reconnects with Last-Event-ID when the stream drops. It returns the last
// status seen.
func (s *Story) Watch(ctx context.Context, id string, onEntry func(operation.Entry), stop func(status string) bool) (string, error) {
	last, status := "", ""
	for {
		done := false
		err := s.Viewer.Stream(ctx, s.orgPath("/operations/%s/log", id), last, func(ev SSE) bool {
			switch ev.Event {
			case "", "message":
				var e operation.Entry
				if json.Unmarshal([]byte(ev.Data), &e) == nil && onEntry != nil {
					onEntry(e)
				}
				last = ev.ID
			case "status", "end":
				var st Status
				_ = json.Unmarshal([]byte(ev.Data), &st)
				status = st.Status
				if ev.Event == "end" || stop != nil && stop(status) {
					done = true
					return false
				}
			case "error":
				done = true
				return false
			}
			return true
		})
		if done {
			return status, nil
		}
		if ctx.Err() != nil {
			return status, ctx.Err()
		}
		if err != nil && StatusOf(err) != 503 {
			return status, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitRollout waits until the rollout has one of the statuses (and is not
// aborting), reading it over the API.
func (s *Story) WaitRollout(ctx context.Context, id string, want ...string) (rolloutapi.Rollout, error) {
	var r rolloutapi.Rollout
	err := Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var err error
		if r, err = s.Rollout(ctx, id); err != nil {
			return false, nil
		}
		return slices.Contains(want, string(r.Status)) && !r.Aborting, nil
	})
	if err != nil {
		return r, fmt.Errorf("rollout %s is %s (%s), not %v: %w", id, r.Status, r.Reason, want, err)
	}
	return r, nil
}

// Log reads an operation's whole log as JSON pages.
func (s *Story) Log(ctx context.Context, id string) ([]operation.Entry, error) {
	var out []operation.Entry
	after := 0
	for {
		var page rolloutapi.LogPage
		if err := s.Viewer.Retry(ctx, "GET", s.orgPath("/operations/%s/log", id)+q("after", strconv.Itoa(after)), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Entries...)
		if len(page.Entries) == 0 || page.Next <= after {
			return out, nil
		}
		after = page.Next
	}
}

// Event is an audit event as the API answers it.
type Event struct {
	Sequence  uint64          `json:"sequence"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Aggregate string          `json:"aggregate"`
	Time      time.Time       `json:"time"`
	Actor     string          `json:"actor,omitempty"`
	Payload   json.RawMessage `json:"payload"`
}

// Events reads the audit log (all pages) with the given filters
// (aggregate, type, actor, since, until).
func (s *Story) Events(ctx context.Context, filters ...string) ([]Event, error) {
	var out []Event
	after := ""
	for {
		var page struct {
			Items []Event `json:"items"`
			Next  string  `json:"next"`
		}
		kv := append(slices.Clone(filters), "after", after, "limit", "1000")
		if err := s.Viewer.Retry(ctx, "GET", s.Path("/events"+q(kv...)), nil, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" || len(page.Items) == 0 {
			return out, nil
		}
		after = page.Next
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
