package service_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	revisions "github.com/anvil-fleet/anvil/services/revisions/service"
)

// TestCatalogRoutes: every token reads the catalog; only the bootstrap
// admin adds to it, a malformed version is a problem naming the field, a
// listed one a conflict; a patch added makes a platform-made revision for
// a pool on its minor, and the audit log names who added it and that the
// platform made the revision.
func TestCatalogRoutes(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()

	for _, tok := range []string{tn.viewer, tn.otherAdmin, adminToken} {
		var cat revapi.Catalog
		if r := s.do("GET", "/api/v1/catalog", tok, nil, nil, &cat); r.status != 200 || !slices.Equal(cat.Versions, revisions.DefaultKubernetesVersions) || r.header.Get("ETag") == "" {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
	}
	if r := s.do("GET", "/api/v1/catalog", "", nil, nil, nil); r.status != 401 {
		t.Fatalf("list without a token: %d", r.status)
	}
	for _, tok := range []string{tn.admin, tn.operator} {
		if r := s.do("POST", "/api/v1/catalog/versions", tok, map[string]any{"version": "1.33.6"}, nil, nil); r.status != 403 {
			t.Fatalf("add as an organization's token: %d %s", r.status, r.body)
		}
	}
	for _, body := range []string{`{"version":"1.33"}`, `{"version":""}`, `{}`, `{"version":1.33}`, `{"version":"1.33.6","minor":"1.33"}`} {
		r := s.do("POST", "/api/v1/catalog/versions", adminToken, body, nil, nil)
		if p := r.problem(); r.status != 422 || len(p.Errors) == 0 {
			t.Errorf("add %s: %d %s", body, r.status, r.body)
		} else if field := p.Errors[0].Field; field != "version" && field != "minor" {
			t.Errorf("add %s names %q", body, field)
		}
	}

	// A pool on 1.33 (1.33.5, the newest patch of the seed).
	base := "/api/v1/orgs/acme"
	cluster := map[string]any{"name": "prod", "api_endpoint": "https://api.prod.example:6443", "kubernetes_version": "1.34.1",
		"kubeconfig": "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n", "bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + fmt.Sprintf("%064x", 42)}
	if r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil); r.status != 201 {
		t.Fatalf("create cluster: %d %s", r.status, r.body)
	}
	pool := map[string]any{"name": "workers", "cluster": "prod", "display_name": "Workers", "auto_apply_platform_revisions": true,
		"kubernetes": map[string]any{"minor": "1.33"}, "flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}
	var created revapi.PoolChange
	if r := s.do("POST", base+"/pools", tn.admin, pool, nil, &created); r.status != 201 || !created.Pool.Spec.AutoApplyPlatformRevisions || created.Pool.KubernetesVersion != "1.33.5" {
		t.Fatalf("create pool: %d %s", r.status, r.body)
	}

	var added revapi.Catalog
	if r := s.do("POST", "/api/v1/catalog/versions", adminToken, map[string]any{"version": "1.33.6"}, nil, &added); r.status != 201 || !slices.Contains(added.Versions, "1.33.6") {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/api/v1/catalog/versions", adminToken, map[string]any{"version": "1.33.6"}, nil, nil); r.status != 409 {
		t.Fatalf("add twice: %d %s", r.status, r.body)
	}

	var p revapi.Pool
	eventstest.Eventually(t, "the platform revision", 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		s.do("GET", base+"/pools/workers", tn.viewer, nil, nil, &p)
		return p.LatestRevision == 2, fmt.Sprintf("%+v", p.Revisions)
	})
	// Revision 1 was saved, not applied: the platform does not roll out
	// on top of it, and says so.
	if r := p.Revisions[1]; !r.PlatformMade || r.Author != "anvil" || p.KubernetesVersion != "1.33.6" || p.AppliedRevision != 0 ||
		!strings.Contains(r.Message, "not applied automatically") {
		t.Fatalf("platform revision: %+v", p)
	}
	var page struct {
		Items []struct {
			Type, Actor string
		}
	}
	s.do("GET", base+"/events?type=pool.revision_created", tn.viewer, nil, nil, &page)
	if n := len(page.Items); n != 2 || page.Items[1].Actor != "platform" {
		t.Fatalf("audit: %+v", page.Items)
	}
}
