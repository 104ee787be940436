package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

func TestCatalogCommands(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc

	cat, err := api.ListCatalog(ctx, nc, api.ListCatalogRequest{Org: "acme"})
	if err != nil || strings.Join(cat.Versions, ",") != testVersions || len(cat.Minors) != 4 || cat.Minors[2].Minor != "1.33" || cat.Minors[2].Latest != "1.33.4" || cat.Version == 0 {
		t.Fatalf("seeded catalog: %s %v", mustJSON(t, cat), err)
	}
	_, err = api.ListCatalog(ctx, nc, api.ListCatalogRequest{Org: "Not_An_Org"})
	wantErr(t, "list invalid", err, errs.KindValidation, "org")
	// A platform administrator belongs to no organization.
	if all, err := api.ListCatalog(ctx, nc, api.ListCatalogRequest{}); err != nil || strings.Join(all.Versions, ",") != testVersions {
		t.Fatalf("list without an org: %s %v", mustJSON(t, all), err)
	}

	added, err := api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.35.0"})
	if err != nil || added.Version <= cat.Version || added.Minors[len(added.Minors)-1].Latest != "1.35.0" {
		t.Fatalf("add: %s %v", mustJSON(t, added), err)
	}
	_, err = api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.35.0"})
	wantErr(t, "add twice", err, errs.KindConflict)
	_, err = api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.35"})
	wantErr(t, "add invalid", err, errs.KindValidation, "version")
	_, err = api.AddCatalogVersion(context.Background(), nc, api.AddCatalogVersionRequest{Version: "1.35.1"})
	wantErr(t, "add without actor", err, errs.KindUnauthorized)

	// The seed applies on the first start only.
	h.stop()
	h.cfg.KubernetesVersions = "1.20.1"
	h.start()
	again, err := api.ListCatalog(ctx, nc, api.ListCatalogRequest{Org: "acme"})
	if err != nil || len(again.Versions) != 6 || again.Version != added.Version {
		t.Fatalf("catalog after a restart with another seed: %s %v", mustJSON(t, again), err)
	}
	if n := len(h.logEvents(events.Filter{Org: "_platform", AggregateType: "catalog", EventTypes: []string{"catalog.seeded"}})); n != 1 {
		t.Fatalf("catalog.seeded events = %d, want 1", n)
	}

	// check skew
	h.createCluster("acme", "prod", "1.33.4")
	for _, c := range []struct {
		req              api.CheckSkewRequest
		allowed, inCat   bool
		kubelet, because string
	}{
		{api.CheckSkewRequest{Org: "acme", ControlPlane: "1.34.1", Kubelet: "1.33"}, true, true, "1.33.4", ""},
		{api.CheckSkewRequest{Org: "acme", Cluster: "prod", Kubelet: "1.34"}, false, true, "1.34.1", "newer than the control plane"},
		{api.CheckSkewRequest{Org: "acme", ControlPlane: "1.35.0", Kubelet: "1.31.9"}, false, true, "1.31.9", "more than 3 minor"},
		{api.CheckSkewRequest{Org: "acme", ControlPlane: "1.34.1", Kubelet: "1.33.2"}, false, false, "1.33.2", "not in the catalog"},
	} {
		got, err := api.CheckSkew(ctx, nc, c.req)
		if err != nil || got.Allowed != c.allowed || got.InCatalog != c.inCat || got.Kubelet != c.kubelet || !strings.Contains(got.Reason, c.because) {
			t.Errorf("check %+v: %+v %v", c.req, got, err)
		}
	}
	_, err = api.CheckSkew(ctx, nc, api.CheckSkewRequest{Org: "acme", Kubelet: "1.2.3.4"})
	wantErr(t, "check invalid", err, errs.KindValidation, "control_plane", "kubelet")
	_, err = api.CheckSkew(ctx, nc, api.CheckSkewRequest{Org: "acme", Kubelet: "1.28"})
	wantErr(t, "check an unsupported minor", err, errs.KindValidation, "kubelet")
	_, err = api.CheckSkew(ctx, nc, api.CheckSkewRequest{Org: "acme", Cluster: "nope", Kubelet: "1.33"})
	wantErr(t, "check a missing cluster", err, errs.KindNotFound)
}

// TestPlatformPatchRevisions: adding a patch to the catalog makes exactly
// one platform-made pending revision for every pool on its minor, in every
// organization; pools whose control plane is older are held back; and a
// redelivery of the event (a restarted service on a fresh consumer)
// changes nothing.
func TestPlatformPatchRevisions(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "a1", "prod", testSpec(), true) // 1.33.4, applied
	h.createPool("acme", "a2", "prod", testSpec(), false)
	old := testSpec()
	old.Kubernetes.Minor = "1.32"
	h.createPool("acme", "a3", "prod", old, false) // 1.32.7: another minor
	h.createCluster("globex", "prod", "1.33.4")    // control plane older than the patch
	h.createPool("globex", "held", "prod", testSpec(), false)
	h.createCluster("globex", "edge", "1.34.1")
	h.createPool("globex", "b1", "edge", testSpec(), false)
	gone := h.createPool("globex", "gone", "edge", testSpec(), false)
	if _, err := api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "globex", Name: "gone", ExpectedVersion: gone.Pool.Version}); err != nil {
		t.Fatal(err)
	}

	if _, err := api.AddCatalogVersion(ctx, nc, api.AddCatalogVersionRequest{Version: "1.33.9"}); err != nil {
		t.Fatal(err)
	}
	h.waitHandler()

	check := func(when string) {
		t.Helper()
		head, _ := h.env.Store.Head(context.Background())
		want := map[string]int{"acme/a1": 2, "acme/a2": 2, "acme/a3": 1, "globex/held": 1, "globex/b1": 2}
		for key, n := range want {
			org, name, _ := strings.Cut(key, "/")
			p := h.getPool(org, name, head)
			if len(p.Revisions) != n {
				t.Fatalf("%s: %s has %d revisions, want %d", when, key, len(p.Revisions), n)
			}
			if n == 2 {
				r := p.Revisions[1]
				if !r.PlatformMade || r.Author != "anvil" || p.KubernetesVersion != "1.33.9" || !strings.Contains(r.Message, "1.33.9") {
					t.Fatalf("%s: %s's platform revision: %s", when, key, mustJSON(t, p))
				}
				// pending: not applied
				if r.Applied || (name == "a1" && p.AppliedRevision != 1) || (name != "a1" && p.AppliedRevision != 0) {
					t.Fatalf("%s: %s's platform revision was applied: %s", when, key, mustJSON(t, p))
				}
			}
		}
		evs := h.logEvents(events.Filter{EventTypes: []string{"pool.revision_created"}})
		if len(evs) != 9 { // 6 creates + 3 platform revisions
			t.Fatalf("%s: %d revision_created events, want 9", when, len(evs))
		}
		for _, e := range evs[6:] {
			if e.Actor != "platform" || e.CausationID == "" {
				t.Fatalf("%s: platform revision event actor %q causation %q", when, e.Actor, e.CausationID)
			}
		}
	}
	check("after the patch")
	if !strings.Contains(h.logs.String(), "platform revision held back") {
		t.Error("the held pool was not logged")
	}

	// Redelivery: the handler's consumer is gone, so a restarted service
	// gets every catalog.version_added again.
	h.stop()
	if err := h.env.JS.DeleteConsumer(context.Background(), events.StreamName, "handler-"+service.PlatformRevisionsHandler); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitHandler()
	time.Sleep(100 * time.Millisecond)
	check("after redelivery")
}
