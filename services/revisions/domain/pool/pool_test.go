package pool

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

func TestCreate(t *testing.T) {
	env := testEnv(t)
	var p Pool
	evs, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: validSpec(), Author: "alice", Message: "first", Apply: true, At: t0}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventTypes(evs); fmt.Sprint(got) != "[pool.created pool.revision_created pool.apply_requested]" {
		t.Fatalf("events = %v", got)
	}
	rev := evs[1].(RevisionCreated).Revision
	if rev.Number != 1 || rev.Config.Kubernetes.Version != "1.33.4" || rev.PlatformMade || rev.Author != "alice" || !rev.CreatedAt.Equal(t0) {
		t.Fatalf("revision = %+v", rev)
	}
	if rev.Hash != rev.Config.Hash() || !strings.HasPrefix(rev.Hash, "sha256:") {
		t.Fatalf("hash = %s", rev.Hash)
	}
	ap := evs[2].(ApplyRequested)
	if ap.Pool != "workers" || ap.Revision != 1 || ap.RequestedBy != "alice" || ap.Rollback || ap.Rollout.NodeReadyTimeout != DefaultNodeReadyTimeout {
		t.Fatalf("apply = %+v", ap)
	}
	apply(&p, evs)
	if _, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: validSpec(), Author: "alice", At: t0}, env); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("second create: %v", err)
	}

	var q Pool
	if _, err := q.Create(Create{Name: "other", Cluster: "staging", Spec: validSpec(), Author: "alice", At: t0}, env); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("unknown cluster: %v", err)
	}
	bad := validSpec()
	bad.Network.VLANs[0].ID = 0
	_, err = q.Create(Create{Name: "Bad Name", Cluster: "prod", Spec: bad, At: t0}, env)
	if got := fieldsOf(err); fmt.Sprint(got) != "[author name network.vlans[0].id]" {
		t.Fatalf("fields = %v (%v)", got, err)
	}
}

func TestKubernetesVersionOnCreate(t *testing.T) {
	tests := []struct {
		minor, controlPlane string
		want                string // resolved version, or "" if refused
		reason              string
	}{
		{"1.33", "1.34.1", "1.33.4", ""},
		{"1.34", "1.34.1", "1.34.1", ""},
		{"1.31", "1.34.1", "1.31.9", ""},
		{"1.30", "1.34.1", "", "more than 3 minor versions older than the control plane 1.34.1"},
		{"1.34", "1.33.9", "", "kubelet 1.34.1 would be newer than the control plane 1.33.9"},
		{"1.33", "1.33.1", "", "kubelet 1.33.4 would be newer than the control plane 1.33.1"},
		{"1.29", "1.34.1", "", "not supported"},
		{"1.35", "1.34.1", "", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.minor+"@"+tt.controlPlane, func(t *testing.T) {
			env := Env{Catalog: testCat, Cluster: testCluster(t, tt.controlPlane)}
			s := validSpec()
			s.Kubernetes.Minor = tt.minor
			var p Pool
			evs, err := p.Create(Create{Name: "w", Cluster: "prod", Spec: s, Author: "a", At: t0}, env)
			if tt.want == "" {
				if fieldsOf(err) == nil || fieldsOf(err)[0] != "kubernetes.minor" || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("want refusal on kubernetes.minor with %q, got %v", tt.reason, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := evs[1].(RevisionCreated).Revision.Config.Kubernetes.Version; got != tt.want {
				t.Fatalf("resolved %s, want %s", got, tt.want)
			}
		})
	}
}

// TestRevisionCreation: a reboot-relevant change makes exactly one
// revision, a non-reboot change none, an identical change none.
func TestRevisionCreation(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*Spec)
		revisions int // new revisions
		settings  bool
	}{
		{"identical", func(*Spec) {}, 0, false},
		{"display name", func(s *Spec) { s.DisplayName = "Database workers" }, 0, true},
		{"rollout max unavailable", func(s *Spec) { s.Rollout.MaxUnavailable = "2" }, 0, true},
		{"rollout window", func(s *Spec) {
			s.Rollout.MaintenanceWindows = []Window{{Days: []string{"sun"}, Start: "01:00", End: "05:00", TimeZone: "UTC"}}
		}, 0, true},
		{"rollout defaults spelled out", func(s *Spec) {
			s.Rollout.DrainTimeout = DefaultDrainTimeout
			s.Rollout.NodeReadyTimeout = DefaultNodeReadyTimeout
		}, 0, false},
		{"display name and rollout", func(s *Spec) { s.DisplayName = "x"; s.Rollout.Pause = 0 }, 0, true},
		{"kubernetes minor", func(s *Spec) { s.Kubernetes.Minor = "1.34" }, 1, false},
		{"kubernetes minor spelled with v", func(s *Spec) { s.Kubernetes.Minor = "v1.33" }, 0, false},
		{"kubernetes version field ignored", func(s *Spec) { s.Kubernetes.Version = "1.33.1" }, 0, false},
		{"flatcar", func(s *Spec) { s.Flatcar.Version = "4230.2.4" }, 1, false},
		{"flatcar channel", func(s *Spec) { s.Flatcar.Channel = ChannelBeta }, 1, false},
		{"vlan id", func(s *Spec) { s.Network.VLANs[0].ID = 101; s.Network.Interfaces[0].Name = "bond0.101" }, 1, false},
		{"bond mode", func(s *Spec) { s.Network.Bonds[0].Mode = "active-backup" }, 1, false},
		{"address", func(s *Spec) { s.Network.Interfaces[1].Addresses = []string{"10.2.0.6/24"} }, 1, false},
		{"cache disk removed", func(s *Spec) { s.CacheDisk = nil }, 1, false},
		{"cache disk wipe", func(s *Spec) { s.CacheDisk.Wipe = true }, 1, false},
		{"node label", func(s *Spec) { s.NodeLabels["anvil.dev/rack"] = "r13" }, 1, false},
		{"taint", func(s *Spec) { s.Taints = nil }, 1, false},
		{"kubelet arg", func(s *Spec) { s.KubeletExtraArgs["max-pods"] = "110" }, 1, false},
		{"ssh key added", func(s *Spec) { s.SSHKeys = append(s.SSHKeys, keyB) }, 1, false},
		{"reboot change and display name", func(s *Spec) { s.SSHKeys = append(s.SSHKeys, keyB); s.DisplayName = "y" }, 1, true},
		{"reordered bond members", func(s *Spec) { s.Network.Bonds[0].Members = []string{"eno2", "eno1"} }, 0, false},
		{"reordered vlans", func(s *Spec) { v := s.Network.VLANs; v[0], v[1] = v[1], v[0] }, 0, false},
		{"vlan default name spelled out", func(s *Spec) { s.Network.VLANs[0].Name = "bond0.100" }, 0, false},
		{"address spelled differently", func(s *Spec) {
			s.Network.Interfaces[1].Addresses = []string{"10.2.0.5/24", "2001:DB8:0::5/64"}
			s.Network.Interfaces[1].Gateways = []string{"10.2.0.1", "2001:db8::1"}
		}, 1, false},
		{"empty vs nil maps", func(s *Spec) {
			s.KubeletExtraArgs = map[string]string{"max-pods": "200"}
			s.Taints = append([]Taint{}, s.Taints...)
		}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, env := created(t)
			s := validSpec()
			tt.mutate(&s)
			evs, err := p.Update(Update{Spec: s, Author: "bob", Message: tt.name, At: t0.Add(time.Hour)}, env)
			if err != nil {
				t.Fatal(err)
			}
			var revs, settings int
			for _, e := range evs {
				switch e := e.(type) {
				case RevisionCreated:
					revs++
					if e.Revision.Number != 2 || e.Revision.Author != "bob" || e.Revision.Message != tt.name {
						t.Fatalf("revision = %+v", e.Revision)
					}
				case SettingsChanged:
					settings++
				default:
					t.Fatalf("unexpected event %T", e)
				}
			}
			if revs != tt.revisions || (settings == 1) != tt.settings {
				t.Fatalf("revisions=%d settings=%d, want %d/%v (%v)", revs, settings, tt.revisions, tt.settings, eventTypes(evs))
			}
			// Deciding did not touch the state.
			if len(p.Revisions) != 1 || p.DisplayName != "Workers" {
				t.Fatal("decide mutated state")
			}
		})
	}
}

func TestNumberingAndApply(t *testing.T) {
	p, env := created(t)
	s := validSpec()
	for i := 2; i <= 4; i++ {
		s.NodeLabels = map[string]string{"anvil.dev/gen": fmt.Sprint(i)}
		evs, err := p.Update(Update{Spec: s, Author: "bob", At: t0}, env)
		if err != nil {
			t.Fatal(err)
		}
		apply(p, evs)
		if latest, _ := p.Latest(); latest.Number != i {
			t.Fatalf("latest = %d, want %d", latest.Number, i)
		}
	}
	// Numbers come from state: a decision on a stale state yields a number
	// that the event store's optimistic concurrency then refuses.
	stale := &Pool{}
	*stale = *p
	stale.Revisions = stale.Revisions[:2]
	evs, _ := stale.Update(Update{Spec: validSpec(), Author: "x", At: t0}, env)
	if evs[0].(RevisionCreated).Revision.Number != 3 {
		t.Fatal("number not from state")
	}

	// Save & Apply with no change applies the latest once.
	evs, err := p.Update(Update{Spec: s, Author: "bob", Apply: true, At: t0}, env)
	if err != nil || fmt.Sprint(eventTypes(evs)) != "[pool.apply_requested]" || evs[0].(ApplyRequested).Revision != 4 {
		t.Fatalf("save&apply = %v, %v", evs, err)
	}
	apply(p, evs)
	if evs, _ := p.Update(Update{Spec: s, Author: "bob", Apply: true, At: t0}, env); len(evs) != 0 {
		t.Fatalf("second save&apply = %v", eventTypes(evs))
	}
	// Save & Apply with a change applies the new revision.
	s.NodeLabels = map[string]string{"anvil.dev/gen": "5"}
	evs, _ = p.Update(Update{Spec: s, Author: "bob", Apply: true, At: t0}, env)
	if fmt.Sprint(eventTypes(evs)) != "[pool.revision_created pool.apply_requested]" || evs[1].(ApplyRequested).Revision != 5 {
		t.Fatalf("events = %v", eventTypes(evs))
	}
	apply(p, evs)

	// Rollback to an older revision is one call.
	evs, err = p.ApplyRevision(ApplyRevision{Revision: 2, RequestedBy: "carol", At: t0}, env)
	if err != nil {
		t.Fatal(err)
	}
	ap := evs[0].(ApplyRequested)
	if ap.Revision != 2 || !ap.Rollback || ap.Hash != p.Revisions[1].Hash || ap.RequestedBy != "carol" {
		t.Fatalf("rollback = %+v", ap)
	}
	apply(p, evs)
	// Re-applying the current revision is allowed (retry after a failure).
	if evs, err := p.ApplyRevision(ApplyRevision{Revision: 2, RequestedBy: "carol", At: t0}, env); err != nil || len(evs) != 1 || evs[0].(ApplyRequested).Rollback {
		t.Fatalf("reapply = %v, %v", evs, err)
	}
	if _, err := p.ApplyRevision(ApplyRevision{Revision: 9, RequestedBy: "carol", At: t0}, env); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("apply missing: %v", err)
	}
	if _, err := p.ApplyRevision(ApplyRevision{Revision: 1, At: t0}, env); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("apply without requester: %v", err)
	}
	// An old revision whose kubelet now breaks the skew policy is refused.
	env.Cluster = testCluster(t, "1.33.1")
	if _, err := p.ApplyRevision(ApplyRevision{Revision: 1, RequestedBy: "carol", At: t0}, env); !errs.Is(err, errs.KindConflict) || !strings.Contains(err.Error(), "1.33.4") {
		t.Fatalf("apply against older control plane: %v", err)
	}
}

func TestUpdateKeepsPatch(t *testing.T) {
	p, env := created(t)
	env.Catalog = env.Catalog.With(catalog.Version{Major: 1, Minor: 33, Patch: 9})
	s := validSpec()
	s.DisplayName = "renamed"
	evs, err := p.Update(Update{Spec: s, Author: "bob", At: t0}, env)
	if err != nil || fmt.Sprint(eventTypes(evs)) != "[pool.settings_changed]" {
		t.Fatalf("unrelated edit bumped the patch: %v %v", eventTypes(evs), err)
	}
	s.Kubernetes.Minor = "1.34"
	evs, _ = p.Update(Update{Spec: s, Author: "bob", At: t0}, env)
	apply(p, evs)
	if got := p.KubernetesVersion().String(); got != "1.34.1" {
		t.Fatalf("version = %s", got)
	}
	// Back to 1.33 resolves to that minor's newest patch.
	s.Kubernetes.Minor = "1.33"
	evs, _ = p.Update(Update{Spec: s, Author: "bob", At: t0}, env)
	apply(p, evs)
	if got := p.KubernetesVersion().String(); got != "1.33.9" {
		t.Fatalf("version = %s", got)
	}
}

func TestPlatformRevision(t *testing.T) {
	p, env := created(t)
	evs, err := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.33.9", At: t0}, Env{Catalog: env.Catalog.With(catalog.Version{Major: 1, Minor: 33, Patch: 9}), Cluster: env.Cluster})
	if err != nil || len(evs) != 1 {
		t.Fatalf("platform revision = %v, %v", evs, err)
	}
	rev := evs[0].(RevisionCreated).Revision
	if !rev.PlatformMade || rev.Author != PlatformAuthor || rev.Number != 2 || rev.Config.Kubernetes.Version != "1.33.9" || rev.Config.Kubernetes.Minor != "1.33" {
		t.Fatalf("revision = %+v", rev)
	}
	// Everything else is carried over.
	want := p.Revisions[0].Config
	want.Kubernetes.Version = "1.33.9"
	if rev.Hash != want.Hash() {
		t.Fatal("platform revision changed more than the version")
	}
	apply(p, evs)
	if p.AppliedRevision != 0 {
		t.Fatal("platform revision was applied")
	}
	if evs, err := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.33.9", At: t0}, env); err != nil || len(evs) != 0 {
		t.Fatalf("repeat = %v, %v", evs, err)
	}
	if _, err := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.34.1", At: t0}, env); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("minor change by the platform: %v", err)
	}
	if _, err := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.33.10", At: t0}, env); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("unknown version: %v", err)
	}
}

func TestPlanPatch(t *testing.T) {
	mk := func(name, cluster, version string) *Pool {
		return &Pool{Name: name, Cluster: cluster, Revisions: []Revision{{Number: 1, Config: Config{Kubernetes: Kubernetes{Minor: version[:4], Version: version}}}}}
	}
	pools := []*Pool{
		mk("c-old", "prod", "1.33.1"),
		mk("a-current", "prod", "1.33.4"),
		mk("b-behind", "prod", "1.33.4"),
		mk("other-minor", "prod", "1.32.7"),
		mk("held", "staging", "1.33.1"),
		mk("unknown-cluster", "gone", "1.33.1"),
		{Name: "deleted", Cluster: "prod", Deleted: true, Revisions: mk("x", "prod", "1.33.1").Revisions},
		nil,
	}
	pools[1].Revisions[0].Config.Kubernetes.Version = "1.33.5"
	cps := map[string]catalog.Version{"prod": {Major: 1, Minor: 34, Patch: 1}, "staging": {Major: 1, Minor: 33, Patch: 4}}
	plan := PlanPatch(testCat, catalog.Version{Major: 1, Minor: 33, Patch: 5}, pools, cps, t0)
	var names []string
	for _, c := range plan.Commands {
		names = append(names, c.Pool)
		if c.Command.KubernetesVersion != "1.33.5" || !c.Command.At.Equal(t0) {
			t.Fatalf("command = %+v", c)
		}
	}
	if fmt.Sprint(names) != "[b-behind c-old]" {
		t.Fatalf("commands for %v", names)
	}
	if len(plan.Held) != 2 || plan.Held[0].Pool != "held" || !strings.Contains(plan.Held[0].Reason, "newer than the control plane 1.33.4") || plan.Held[1].Pool != "unknown-cluster" {
		t.Fatalf("held = %+v", plan.Held)
	}
}

func TestDelete(t *testing.T) {
	p, env := created(t)
	if _, err := p.Delete(Delete{}); !errs.Is(err, errs.KindValidation) {
		t.Fatal(err)
	}
	evs, _ := p.Delete(Delete{DeletedBy: "alice"})
	apply(p, evs)
	if _, err := p.Update(Update{Spec: validSpec(), Author: "a", At: t0}, env); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("update after delete: %v", err)
	}
	if _, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: validSpec(), Author: "a", At: t0}, env); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("recreate: %v", err)
	}
	var none Pool
	if _, err := none.ApplyRevision(ApplyRevision{Revision: 1, RequestedBy: "a"}, env); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("apply on nothing: %v", err)
	}
}

// TestEventsRoundTrip folds events decoded from JSON (as the event store
// delivers them, by value and by pointer) into the same state.
func TestEventsRoundTrip(t *testing.T) {
	env := testEnv(t)
	var p Pool
	evs, _ := p.Create(Create{Name: "workers", Cluster: "prod", Spec: validSpec(), Author: "alice", Apply: true, At: t0}, env)
	apply(&p, evs)
	var q Pool
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		ptr := reflect.New(reflect.TypeOf(e))
		if err := json.Unmarshal(b, ptr.Interface()); err != nil {
			t.Fatal(err)
		}
		q.Apply(ptr.Interface())
	}
	q.Apply("unknown")
	q.Apply(nil)
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("state differs after JSON round trip:\n%+v\n%+v", p, q)
	}
	if q.Revisions[0].Hash != q.Revisions[0].Config.Hash() {
		t.Fatal("hash not stable across JSON")
	}
	seen := map[string]bool{}
	for _, e := range EventTypes() {
		name := e.(interface{ EventType() string }).EventType()
		if !strings.HasPrefix(name, "pool.") || seen[name] {
			t.Errorf("event type %q", name)
		}
		seen[name] = true
	}
}

func TestHashIsCanonical(t *testing.T) {
	// The hash of a fixed config is pinned: changing the canonical encoding
	// would silently make a new revision for every pool.
	c := Config{Kubernetes: Kubernetes{Minor: "1.33", Version: "1.33.4"}, Flatcar: Flatcar{Channel: "stable", Version: "4230.2.3"}}
	const want = "sha256:a3244fe3b3fe1b66e487d80fede45e019d4ca751bfd08a320408b784a2cf3284"
	if got := c.Hash(); got != want {
		t.Fatalf("hash = %s, want %s", got, want)
	}
	a := validSpec().Config
	b := validSpec().Config
	b.SSHKeys = []string{keyA}
	b.Taints = []Taint{{Key: "dedicated", Value: "db", Effect: EffectNoSchedule}}
	if a.Hash() != b.Hash() {
		t.Fatal("equal configs hash differently")
	}
}

func TestSpecJSONIsFlat(t *testing.T) {
	b, err := json.Marshal(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"display_name", "kubernetes", "flatcar", "network", "cache_disk", "node_labels", "taints", "kubelet_extra_args", "ssh_keys", "rollout"} {
		if _, ok := m[k]; !ok {
			t.Errorf("spec JSON lacks top-level %q: %s", k, b)
		}
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, validSpec()) {
		t.Fatalf("round trip: %v\n%+v", err, back)
	}
}
