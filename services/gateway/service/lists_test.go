package service_test

import (
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
)

// TestListEnvelope: every list answers {"items", "next"} and takes
// ?cursor= and ?limit=; following next visits every item once, in order.
func TestListEnvelope(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	const kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.example:6443'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: c\n  context: {cluster: c, user: drain}\ncurrent-context: c\n"
	for _, name := range []string{"prod", "stage"} {
		cluster := map[string]any{"name": name, "api_endpoint": "https://api." + name + ".example:6443", "kubernetes_version": "1.34.1",
			"kubeconfig": kubeconfig, "bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + fmt.Sprintf("%064x", 42)}
		if r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil); r.status != 201 {
			t.Fatalf("create cluster %s: %d %s", name, r.status, r.body)
		}
	}
	spec := func(name string) map[string]any {
		return map[string]any{"name": name, "cluster": "prod", "display_name": name,
			"kubernetes": map[string]any{"minor": "1.33"}, "flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}
	}
	for _, name := range []string{"gamma", "alpha", "beta"} {
		if r := s.do("POST", base+"/pools", tn.admin, spec(name), nil, nil); r.status != 201 {
			t.Fatalf("create pool %s: %d %s", name, r.status, r.body)
		}
	}
	for n := 2; n <= 3; n++ { // revisions 2 and 3 of alpha
		sp := spec("alpha")
		delete(sp, "cluster")
		sp["node_labels"] = map[string]any{"n": fmt.Sprint(n)}
		if r := s.do("PUT", base+"/pools/alpha", tn.admin, sp, nil, nil); r.status != 200 {
			t.Fatalf("update pool: %d %s", r.status, r.body)
		}
	}

	// all follows next two at a time and returns the key of each item.
	all := func(path, tok, key string) []string {
		t.Helper()
		var keys []string
		cursor := ""
		for range 20 {
			var page struct {
				Items []map[string]any `json:"items"`
				Next  *string          `json:"next"`
			}
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			r := s.do("GET", path+sep+"limit=2&cursor="+url.QueryEscape(cursor), tok, nil, nil, &page)
			if r.status != 200 || page.Items == nil {
				t.Fatalf("GET %s: %d %s", path, r.status, r.body)
			}
			if len(page.Items) > 2 {
				t.Fatalf("GET %s?limit=2: %d items", path, len(page.Items))
			}
			for _, it := range page.Items {
				keys = append(keys, fmt.Sprint(it[key]))
			}
			if page.Next == nil || *page.Next == "" {
				return keys
			}
			cursor = *page.Next
		}
		t.Fatalf("GET %s: next never ends", path)
		return nil
	}
	for _, c := range []struct {
		path, tok, key, want string
	}{
		{base + "/pools", tn.viewer, "name", "alpha beta gamma"},
		{base + "/pools?cluster=stage", tn.viewer, "name", ""},
		{base + "/clusters", tn.viewer, "name", "prod stage"},
		{base + "/pools/alpha/revisions", tn.viewer, "number", "1 2 3"},
		{"/api/v1/orgs", adminToken, "id", "acme globex"},
		{"/api/v1/orgs", tn.viewer, "id", "acme"},
		{base + "/tokens", tn.admin, "name", "viewer-bot operator-bot admin-bot"},
		{base + "/enrollment-tokens", tn.admin, "name", "rack"},
	} {
		if got := strings.Join(all(c.path, c.tok, c.key), " "); got != c.want {
			t.Errorf("GET %s, every page: %q, want %q", c.path, got, c.want)
		}
	}
	// a bad limit or cursor is a 422 naming the parameter
	for _, c := range []struct{ path, field string }{
		{base + "/pools?limit=0", "limit"},
		{base + "/clusters?limit=1001", "limit"},
		{base + "/rollouts?limit=501", "limit"},
		{base + "/operations?limit=501", "limit"},
		{base + "/pools/alpha/revisions?cursor=x", "cursor"},
		{base + "/tokens?cursor=no-such-token", "cursor"},
		{"/api/v1/orgs?limit=x", "limit"},
	} {
		r := s.do("GET", c.path, adminToken, nil, nil, nil)
		if p := r.problem(); r.status != 422 || len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Errorf("GET %s: %d %s, want 422 naming %s", c.path, r.status, r.body, c.field)
		}
	}
}

// TestVersionRoute: GET /version answers without a token.
func TestVersionRoute(t *testing.T) {
	s := startStack(t)
	var v map[string]string
	if r := s.do("GET", "/version", "", nil, nil, &v); r.status != 200 {
		t.Fatalf("GET /version: %d %s", r.status, r.body)
	}
	if v["version"] == "" || v["git_commit"] == "" || v["go_version"] != runtime.Version() || len(v) != 3 {
		t.Fatalf("GET /version: %v", v)
	}
}
