package pool

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// TestAutoApplySetting: auto_apply_platform_revisions is a setting that
// needs no reboot: changing it is a SettingsChanged and no revision, and
// it survives the JSON of its events.
func TestAutoApplySetting(t *testing.T) {
	env := testEnv(t)
	var p Pool
	spec := validSpec()
	spec.AutoApplyPlatformRevisions = true
	evs, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: spec, Author: "alice", At: t0}, env)
	if err != nil {
		t.Fatal(err)
	}
	apply(&p, evs)
	if !p.AutoApplyPlatformRevisions || !p.Spec().AutoApplyPlatformRevisions {
		t.Fatal("the setting was not kept at create")
	}

	spec.AutoApplyPlatformRevisions = false
	evs, err = p.Update(Update{Spec: spec, Author: "alice", At: t0}, env)
	if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.settings_changed"}) {
		t.Fatalf("turning it off: %v %v", eventTypes(evs), err)
	}
	apply(&p, evs)
	if p.AutoApplyPlatformRevisions || len(p.Revisions) != 1 {
		t.Fatalf("after turning it off: %+v", p)
	}
	if evs, err := p.Update(Update{Spec: spec, Author: "alice", At: t0}, env); err != nil || len(evs) != 0 {
		t.Fatalf("saving the same spec again: %v %v", eventTypes(evs), err)
	}

	// JSON: by value and by pointer, as the store delivers them.
	spec.AutoApplyPlatformRevisions = true
	evs, _ = p.Update(Update{Spec: spec, Author: "alice", At: t0}, env)
	var q Pool
	for _, e := range evs {
		b, _ := json.Marshal(e)
		ptr := reflect.New(reflect.TypeOf(e))
		if err := json.Unmarshal(b, ptr.Interface()); err != nil {
			t.Fatal(err)
		}
		q.Apply(ptr.Interface())
	}
	if !q.AutoApplyPlatformRevisions {
		t.Fatal("settings_changed lost the setting in JSON")
	}
	// An event from before the setting existed turns it off (its default).
	var old SettingsChanged
	if err := json.Unmarshal([]byte(`{"display_name":"w","rollout":{}}`), &old); err != nil || old.AutoApplyPlatformRevisions {
		t.Fatalf("old event: %+v %v", old, err)
	}
}

// TestPlatformRevisionAutoApply: with auto-apply on, a platform revision
// and its apply are one decision, requested by the platform, with the
// rollout strategy (and so the maintenance windows) in force, and the
// revision's message says what was decided and why. It is not applied
// on top of a revision someone saved but did not apply, nor when the app
// holds it; a repeat decides nothing.
func TestPlatformRevisionAutoApply(t *testing.T) {
	windows := []Window{{Days: []string{"sat"}, Start: "02:00", End: "05:00", TimeZone: "Europe/Zurich"}}
	newPool := func(t *testing.T, applied bool, mod func(*Spec)) (*Pool, Env) {
		env := testEnv(t)
		var p Pool
		spec := validSpec()
		spec.AutoApplyPlatformRevisions = true
		spec.Rollout.MaintenanceWindows = windows
		if mod != nil {
			mod(&spec)
		}
		evs, err := p.Create(Create{Name: "workers", Cluster: "prod", Spec: spec, Author: "alice", Apply: applied, At: t0}, env)
		if err != nil {
			t.Fatal(err)
		}
		apply(&p, evs)
		// The patch joins the catalog after the pool was made.
		env.Catalog = env.Catalog.With(catalog.Version{Major: 1, Minor: 33, Patch: 9})
		return &p, env
	}
	cmd := CreatePlatformRevision{KubernetesVersion: "1.33.9", Message: "Kubernetes patch release 1.33.9 (was 1.33.4)", At: t0.Add(time.Hour)}

	t.Run("applied, in the windows", func(t *testing.T) {
		p, env := newPool(t, true, nil)
		evs, err := p.CreatePlatformRevision(cmd, env)
		if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.revision_created", "pool.apply_requested"}) {
			t.Fatalf("%v %v", eventTypes(evs), err)
		}
		rev := evs[0].(RevisionCreated).Revision
		ar := evs[1].(ApplyRequested)
		if ar.Revision != 2 || ar.Hash != rev.Hash || ar.RequestedBy != PlatformActor || ar.Rollback ||
			!ar.RequestedAt.Equal(cmd.At) || !reflect.DeepEqual(ar.Rollout.MaintenanceWindows, windows) ||
			ar.RolloutID != RolloutIDOf("workers", 2, cmd.At) || ar.Pool != "workers" || ar.Cluster != "prod" {
			t.Fatalf("apply = %+v", ar)
		}
		if !strings.HasPrefix(rev.Message, cmd.Message+"; applied automatically") || !strings.Contains(rev.Message, "maintenance windows") {
			t.Fatalf("message = %q", rev.Message)
		}
		apply(p, evs)
		if p.AppliedRevision != 2 {
			t.Fatalf("applied = %d", p.AppliedRevision)
		}
		if evs, err := p.CreatePlatformRevision(cmd, env); err != nil || len(evs) != 0 {
			t.Fatalf("repeat = %v, %v", eventTypes(evs), err)
		}
	})
	t.Run("no windows: at once", func(t *testing.T) {
		p, env := newPool(t, true, func(s *Spec) { s.Rollout.MaintenanceWindows = nil })
		evs, _ := p.CreatePlatformRevision(cmd, env)
		if len(evs) != 2 || !strings.Contains(evs[0].(RevisionCreated).Revision.Message, "no maintenance windows, so at once") {
			t.Fatalf("%v", evs)
		}
	})
	t.Run("off: pending", func(t *testing.T) {
		p, env := newPool(t, true, func(s *Spec) { s.AutoApplyPlatformRevisions = false })
		evs, err := p.CreatePlatformRevision(cmd, env)
		if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.revision_created"}) || evs[0].(RevisionCreated).Revision.Message != cmd.Message {
			t.Fatalf("%v %v", evs, err)
		}
	})
	t.Run("never applied", func(t *testing.T) {
		p, env := newPool(t, false, nil) // revision 1 saved, never applied
		evs, err := p.CreatePlatformRevision(cmd, env)
		if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.revision_created"}) {
			t.Fatalf("%v %v", eventTypes(evs), err)
		}
		if msg := evs[0].(RevisionCreated).Revision.Message; !strings.Contains(msg, "not applied automatically") || !strings.Contains(msg, "ever applied") {
			t.Fatalf("message = %q", msg)
		}
	})
	t.Run("a saved but unapplied revision comes first", func(t *testing.T) {
		p, env := newPool(t, true, nil)
		spec := p.Spec()
		spec.NodeLabels = map[string]string{"anvil.dev/rack": "r13"}
		evs, err := p.Update(Update{Spec: spec, Author: "alice", At: t0}, env) // revision 2, not applied
		if err != nil || len(evs) != 1 {
			t.Fatalf("save: %v %v", eventTypes(evs), err)
		}
		apply(p, evs)
		evs, err = p.CreatePlatformRevision(cmd, env)
		if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.revision_created"}) {
			t.Fatalf("%v %v", eventTypes(evs), err)
		}
		if msg := evs[0].(RevisionCreated).Revision.Message; !strings.Contains(msg, "not applied automatically") || !strings.Contains(msg, "revision 2") {
			t.Fatalf("message = %q", msg)
		}
	})
	t.Run("a pending platform revision before it", func(t *testing.T) {
		p, env := newPool(t, true, func(s *Spec) { s.AutoApplyPlatformRevisions = false })
		evs, _ := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.33.9", At: t0}, env) // revision 2, pending
		apply(p, evs)
		spec := p.Spec()
		spec.AutoApplyPlatformRevisions = true
		evs, _ = p.Update(Update{Spec: spec, Author: "alice", At: t0}, env)
		apply(p, evs)
		env.Catalog = env.Catalog.With(catalog.Version{Major: 1, Minor: 33, Patch: 10})
		evs, err := p.CreatePlatformRevision(CreatePlatformRevision{KubernetesVersion: "1.33.10", At: t0}, env)
		if err != nil || !slices.Equal(eventTypes(evs), []string{"pool.revision_created", "pool.apply_requested"}) || evs[1].(ApplyRequested).Revision != 3 {
			t.Fatalf("only the platform's own version bump lies between: %v %v", eventTypes(evs), err)
		}
	})
	t.Run("held by the app", func(t *testing.T) {
		p, env := newPool(t, true, nil)
		held := cmd
		held.ApplyHeld = "the boot service cannot serve its files"
		evs, err := p.CreatePlatformRevision(held, env)
		if err != nil || len(evs) != 1 || !strings.HasSuffix(evs[0].(RevisionCreated).Revision.Message, "not applied automatically: "+held.ApplyHeld) {
			t.Fatalf("%v %v", evs, err)
		}
	})
}
