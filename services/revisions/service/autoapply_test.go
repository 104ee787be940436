package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

// TestAutoApplyPlatformRevisions: a pool with auto_apply_platform_revisions
// gets the platform's patch revision and its pool.apply_requested in one
// append, requested by "platform" with the pool's maintenance windows and
// a rollout id; the message says why. A pool with the setting off, or one
// whose latest revision was saved but not applied, gets a pending
// revision. A patch whose files the boot service lacks is not applied. A
// redelivered catalog event changes nothing.
func TestAutoApplyPlatformRevisions(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")
	auto := testSpec() // 1.33.4
	auto.AutoApplyPlatformRevisions = true
	auto.Rollout.MaintenanceWindows = []api.MaintenanceWindow{{Days: []string{"sat", "sun"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Zurich"}}
	c := h.createPool("acme", "auto", "prod", auto, true)
	if !c.Pool.Spec.AutoApplyPlatformRevisions {
		t.Fatalf("the setting was not kept: %s", mustJSON(t, c.Pool.Spec))
	}
	h.createPool("acme", "manual", "prod", testSpec(), true)
	// A saved but unapplied change: the platform does not roll it out.
	h.createPool("acme", "draft", "prod", auto, true)
	draft := auto
	draft.NodeLabels = map[string]string{"anvil.dev/rack": "r13"}
	if _, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "draft", draft)); err != nil {
		t.Fatal(err)
	}
	// Turning the setting on later is a settings change, not a revision.
	manual := testSpec()
	manual.AutoApplyPlatformRevisions = true
	h.createPool("acme", "later", "prod", testSpec(), true)
	ch, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "later", manual))
	if err != nil || !ch.SettingsChanged || ch.RevisionCreated != 0 || !ch.Pool.Spec.AutoApplyPlatformRevisions {
		t.Fatalf("turn it on: %s %v", mustJSON(t, ch), err)
	}

	// The boot service has the patch's files, as a mirror would.
	if err := simassets.Write(h.assets, "1.33.9"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.33.9"}); err != nil {
		t.Fatal(err)
	}
	h.waitHandler()

	check := func(when string) {
		t.Helper()
		head, _ := h.env.Store.Head(context.Background())
		for _, name := range []string{"auto", "later"} {
			p := h.getPool("acme", name, head)
			if p.LatestRevision != 2 || p.AppliedRevision != 2 || p.KubernetesVersion != "1.33.9" {
				t.Fatalf("%s: %s: %s", when, name, mustJSON(t, p))
			}
			if r := p.Revisions[1]; !r.PlatformMade || !r.Applied || !strings.Contains(r.Message, "applied automatically because the pool auto-applies platform revisions") {
				t.Fatalf("%s: %s's revision 2: %s", when, name, mustJSON(t, r))
			}
		}
		if p := h.getPool("acme", "manual", head); p.LatestRevision != 2 || p.AppliedRevision != 1 {
			t.Fatalf("%s: manual: %s", when, mustJSON(t, p))
		}
		if p := h.getPool("acme", "draft", head); p.LatestRevision != 3 || p.AppliedRevision != 1 ||
			!strings.Contains(p.Revisions[2].Message, "not applied automatically") {
			t.Fatalf("%s: draft: %s", when, mustJSON(t, p))
		}
		applies := h.logEvents(events.Filter{Org: "acme", EventTypes: []string{"pool.apply_requested"}})
		var platform []events.Envelope
		for _, e := range applies {
			if e.Actor == "platform" {
				platform = append(platform, e)
			}
		}
		if len(applies) != 6 || len(platform) != 2 { // 4 creates + 2 platform applies
			t.Fatalf("%s: %d applies, %d by the platform", when, len(applies), len(platform))
		}
		for _, e := range platform {
			var ar pool.ApplyRequested
			if err := json.Unmarshal(e.Payload, &ar); err != nil {
				t.Fatal(err)
			}
			if ar.RequestedBy != "platform" || ar.Revision != 2 || ar.RolloutID == "" || e.CausationID == "" {
				t.Fatalf("%s: platform apply %s (causation %q)", when, e.Payload, e.CausationID)
			}
			if ar.Pool == "auto" && len(ar.Rollout.MaintenanceWindows) != 1 {
				t.Fatalf("%s: the apply lacks the pool's windows: %s", when, e.Payload)
			}
		}
	}
	check("after the patch")

	// Redelivery: a restarted service on a fresh consumer gets the event
	// again and changes nothing.
	h.stop()
	if err := h.env.JS.DeleteConsumer(context.Background(), events.StreamName, "handler-"+service.PlatformRevisionsHandler); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitHandler()
	check("after redelivery")

	// A patch the boot service has no files for is made, but not applied.
	if _, err := api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.33.10"}); err != nil {
		t.Fatal(err)
	}
	h.waitHandler()
	head, _ := h.env.Store.Head(context.Background())
	p := h.getPool("acme", "auto", head)
	if p.LatestRevision != 3 || p.AppliedRevision != 2 || !strings.Contains(p.Revisions[2].Message, "not applied automatically: the boot service cannot serve its files") {
		t.Fatalf("patch without files: %s", mustJSON(t, p))
	}
}
