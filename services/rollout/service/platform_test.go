package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/operation"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
	"github.com/anvil-fleet/anvil/services/rollout/service"
)

// platformPatch is the Kubernetes patch release TestPlatformPatchRollout
// adds to the catalog. The boot service has its files from the start (as
// a mirror would); the catalog does not list it until the test adds it.
// It is a patch of 1.36, not of 1.37: the harness's API server is 1.37.1,
// and a kubelet is never newer than its control plane.
const platformPatch = "1.36.5"

// testClock is the rollout service's clock: the real time, moved forward
// by an offset the test sets, so that a maintenance window hours away can
// open without waiting for it.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) jumpTo(at time.Time) { c.offset.Store(int64(time.Until(at))) }

// rolloutWithClock replaces the stack's rollout service with one that
// reads the time from now.
func (s *stack) rolloutWithClock(now func() time.Time) {
	s.t.Helper()
	s.killRollout()
	ready := make(chan *service.Service, 1)
	var svcRef *service.Service
	stop := s.run("rollout with a test clock", func(ctx context.Context) error {
		return service.Start(ctx, s.rolloutCfg, svc.Options{Conn: s.conn(), Logger: s.logger("rollout")}, service.Hooks{Ready: ready, Now: now})
	}, func() { svcRef = <-ready })
	s.mu.Lock()
	s.rollout, s.stopRoll = svcRef, stop
	s.mu.Unlock()
}

// TestPlatformPatchRollout is seeds 001 and 002 end to end: a platform
// administrator adds a Kubernetes patch release to the catalog; the
// platform makes a revision to it for a pool that auto-applies platform
// revisions and requests its rollout itself; the rollout waits, saying
// until when, while the pool's maintenance window is closed; once the
// window opens it rolls the patch out to every machine by itself.
func TestPlatformPatchRollout(t *testing.T) {
	s := newStack(t)
	clock := &testClock{}
	s.rolloutWithClock(clock.Now)
	org, name := "plat", "plat"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, name, fleet, 3)

	spec := poolSpec("1", steady("1"))
	spec.Kubernetes.Minor = "1.36"
	spec.AutoApplyPlatformRevisions = true
	s.createPool(org, name, "c1", spec)
	reboots := map[string]int{}
	for _, m := range ms {
		reboots[m.Hostname()] = len(m.Reboots())
	}

	// A daily window that is closed now and opens in two hours.
	opens := clock.Now().Add(2 * time.Hour).UTC().Truncate(time.Minute)
	spec.Rollout.MaintenanceWindows = []revapi.MaintenanceWindow{{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"},
		Start: opens.Format("15:04"), End: opens.Add(time.Hour).Format("15:04"), TimeZone: "UTC"}}
	// And remediation, which the rollout takes from the pool (the service's
	// --remediation-max-in-flight, its default, is off here).
	spec.Rollout.Remediation = &revapi.Remediation{MaxInFlight: 2}
	ch, err := revapi.UpdatePool(s.ctx, s.nc, revapi.NewUpdatePoolRequest(org, name, spec))
	if err != nil || !ch.SettingsChanged || ch.RevisionCreated != 0 {
		t.Fatalf("set the window: %+v %v", ch, err)
	}

	s.markApply(name)
	if _, err := revapi.AddCatalogVersion(s.ctx, s.nc, revapi.AddCatalogVersionRequest{Version: platformPatch}); err != nil {
		t.Fatal(err)
	}
	var p revapi.Pool
	s.eventually("the platform's revision, applied", time.Minute, func() (bool, string) {
		p, err = revapi.GetPool(s.ctx, s.nc, revapi.GetPoolRequest{Org: org, Name: name})
		return err == nil && p.LatestRevision == 2 && p.AppliedRevision == 2, fmt.Sprintf("%+v %v", p.Revisions, err)
	})
	if r := p.Revisions[1]; !r.PlatformMade || p.KubernetesVersion != platformPatch ||
		!strings.Contains(r.Message, "Kubernetes patch release "+platformPatch+" (was 1.36.4); applied automatically because the pool auto-applies platform revisions, in its maintenance windows") {
		t.Fatalf("platform revision: %+v", r)
	}

	// The rollout waits for the window and says until when.
	var waiting api.Rollout
	s.eventually("the rollout waits for the window", time.Minute, func() (bool, string) {
		r, ok := s.findRollout(org, name, 2)
		if !ok {
			return false, "no rollout yet"
		}
		waiting = s.get(org, r.ID)
		for _, c := range waiting.Conditions {
			if c.Type == operation.ConditionProgressing && c.Reason == "OutsideMaintenanceWindow" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s %+v", waiting.Status, waiting.Conditions)
	})
	c := waiting.Conditions[slices.IndexFunc(waiting.Conditions, func(c api.Condition) bool { return c.Type == operation.ConditionProgressing })]
	if !c.Until.Equal(opens) || !strings.Contains(c.Message, "the next one opens at "+opens.Format(time.RFC3339)) {
		t.Fatalf("the condition does not say when the window opens (%s): %+v", opens.Format(time.RFC3339), c)
	}
	if waiting.RequestedBy != revapi.PlatformActor || waiting.Progress.Done != 0 || waiting.Progress.InProgress != 0 || len(s.cordoned(name+"-")) != 0 {
		t.Fatalf("waiting rollout: requested by %q, progress %+v", waiting.RequestedBy, waiting.Progress)
	}
	if got := waiting.Strategy.RemediationMaxInFlight; got != 2 || s.rolloutCfg.RemediationMaxInFlight != 0 {
		t.Fatalf("the rollout remediates %d machines at a time, want the pool's 2", got)
	}

	// The window opens: the rollout proceeds by itself.
	clock.jumpTo(opens.Add(time.Minute))
	done := s.waitRollout(org, name, 2, 5*time.Minute, api.StatusSucceeded)
	if done.ID != waiting.ID || done.Progress.Done != 3 || done.Progress.Total != 3 {
		t.Fatalf("rollout %s: %+v", done.ID, done.Progress)
	}
	s.registryAll(org, name, "ready", 2)
	for _, m := range ms {
		if got := len(m.Reboots()); got != reboots[m.Hostname()]+1 {
			t.Fatalf("%s rebooted %d times for the patch, want once", m.Hostname(), got-reboots[m.Hostname()])
		}
	}
	if c := s.cordoned(name + "-"); len(c) > 0 {
		t.Fatalf("nodes left cordoned: %v", c)
	}
	rev, err := revapi.GetRevision(s.ctx, s.nc, revapi.GetRevisionRequest{Org: org, Pool: name, Revision: 2})
	if err != nil || rev.KubernetesVersion != platformPatch || rev.Config.Kubernetes.Version != platformPatch {
		t.Fatalf("revision 2: %+v %v", rev, err)
	}
	// No machine was touched before the window opened.
	var entries []api.Entry
	for after := 0; ; {
		page, err := s.api.Log(s.ctx, api.LogRequest{Org: org, ID: done.ID, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) == 0 {
			break
		}
		entries, after = append(entries, page.Entries...), page.Next
	}
	cordons := 0
	for _, e := range entries {
		if e.Step == api.Step(rollout.StepCordon) {
			cordons++
			if e.At.Before(opens) {
				t.Fatalf("%s before the window opened at %s", e, opens.Format(time.RFC3339))
			}
		}
	}
	if cordons == 0 {
		t.Fatalf("no cordon in the log: %+v", entries)
	}

	// The audit log: the platform asked, as a consequence of the catalog.
	var applies []events.Envelope
	err = s.env.Store.Replay(s.ctx, events.Filter{Org: org, AggregateType: "pool", EventTypes: []string{"pool.apply_requested"}},
		events.Position{}, events.Position{}, func(e *events.Envelope) error { applies = append(applies, *e); return nil })
	if err != nil || len(applies) != 2 {
		t.Fatalf("%d applies: %v", len(applies), err)
	}
	var ar revapi.ApplyRequested
	if err := json.Unmarshal(applies[1].Payload, &ar); err != nil {
		t.Fatal(err)
	}
	if applies[1].Actor != revapi.PlatformActor || applies[1].CausationID == "" || ar.RequestedBy != revapi.PlatformActor || ar.RolloutID != done.ID {
		t.Fatalf("the platform's apply: actor %q causation %q %s", applies[1].Actor, applies[1].CausationID, applies[1].Payload)
	}
}
