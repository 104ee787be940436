package service_test

import (
	"fmt"
	"strings"
	"testing"
)

func TestClusterPoolRevisionRoutes(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: kubeconfig-plaintext-7c1e5d}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n"
	cluster := map[string]any{"name": "prod", "api_endpoint": "https://api.prod.example:6443", "kubernetes_version": "1.34.1",
		"kubeconfig": kubeconfig, "bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + fmt.Sprintf("%064x", 42)}
	r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil)
	if r.status != 201 || strings.Contains(string(r.body), "kubeconfig-plaintext") {
		t.Fatalf("create cluster: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/clusters", tn.admin, map[string]any{"name": "Bad Name!", "api_endpoint": "http://x"}, nil, nil); r.status != 422 || len(r.problem().Errors) < 2 {
		t.Fatalf("bad cluster: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/clusters/nope", tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("missing cluster: %d", r.status)
	}

	spec := map[string]any{"name": "workers", "cluster": "prod", "display_name": "Workers",
		"kubernetes": map[string]any{"minor": "1.33"}, "flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"},
		"network": map[string]any{"interfaces": []any{map[string]any{"name": "eno1", "dhcp": "ipv4"}}},
		"rollout": map[string]any{"max_unavailable": "25%"}}
	var pool struct {
		Version   uint64
		Revisions []struct{ Number int }
	}
	r = s.do("POST", base+"/pools", tn.admin, spec, nil, nil)
	if r.status != 201 {
		t.Fatalf("create pool: %d %s", r.status, r.body)
	}
	// The admin reads its own write (read-your-writes): another caller may
	// see the pool between the events of its creation, one append of
	// several, whose last one a conditional write must name (docs/api.md,
	// "Consistency").
	r = s.do("GET", base+"/pools/workers", tn.admin, nil, nil, &pool)
	etag := r.header.Get("ETag")
	if r.status != 200 || etag == "" || etag != fmt.Sprintf(`"%d"`, pool.Version) {
		t.Fatalf("get pool: %d %s etag %q", r.status, r.body, etag)
	}
	// Save & Apply a Kubernetes minor change: a new revision and an apply request
	delete(spec, "cluster") // a pool never moves between clusters
	spec["kubernetes"] = map[string]any{"minor": "1.34"}
	spec["apply"] = true
	var change struct {
		RevisionCreated int    `json:"revision_created"`
		ApplyRequested  int    `json:"apply_requested"` // the revision asked to be rolled out
		Rollout         string `json:"rollout"`         // the rollout it starts
	}
	r = s.do("PUT", base+"/pools/workers", tn.admin, spec, map[string]string{"If-Match": etag}, &change)
	if r.status != 200 || change.RevisionCreated != 2 || change.ApplyRequested != 2 {
		t.Fatalf("save & apply: %d %s", r.status, r.body)
	}
	// The answer names the rollout the apply starts, and where to follow it.
	if !strings.HasPrefix(change.Rollout, "ro-") || r.header.Get("Location") != base+"/rollouts/"+change.Rollout {
		t.Fatalf("save & apply names rollout %q at Location %q", change.Rollout, r.header.Get("Location"))
	}
	if r := s.do("PUT", base+"/pools/workers", tn.admin, spec, map[string]string{"If-Match": etag}, nil); r.status != 412 {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	spec["network"] = map[string]any{"vlans": []any{map[string]any{"id": 5000, "parent": "eno1"}}}
	if r := s.do("PUT", base+"/pools/workers", tn.admin, spec, nil, nil); r.status != 422 || !strings.Contains(string(r.body), "network.vlans[0].id") {
		t.Fatalf("bad VLAN: %d %s", r.status, r.body)
	}
	var list struct {
		Items []struct{ Number int }
		Next  string
	}
	s.do("GET", base+"/pools/workers/revisions", tn.admin, nil, nil, &list)
	if len(list.Items) != 2 || list.Items[1].Number != 2 || list.Next != "" {
		t.Fatalf("revisions: %+v", list)
	}
	var diff struct {
		Changes  []struct{ Path string }
		Ignition string
	}
	s.do("GET", base+"/pools/workers/revisions/2/diff?against=1", tn.viewer, nil, nil, &diff)
	if len(diff.Changes) == 0 || !strings.Contains(diff.Ignition, "@@") {
		t.Fatalf("diff: %+v", diff)
	}
	if r := s.do("GET", base+"/pools/workers/revisions/1/ignition", tn.viewer, nil, nil, nil); r.status != 200 || !strings.Contains(string(r.body), `"3.4.0"`) {
		t.Fatalf("ignition: %d %.200s", r.status, r.body)
	}
	// rollback: apply revision 1 (operator may)
	var rb struct {
		Rollback bool   `json:"rollback"`
		Applied  int    `json:"apply_requested"`
		Rollout  string `json:"rollout"`
	}
	if r := s.do("POST", base+"/pools/workers/revisions/1/apply", tn.operator, nil, nil, &rb); r.status != 200 || !rb.Rollback || rb.Applied != 1 ||
		rb.Rollout == "" || rb.Rollout == change.Rollout || r.header.Get("Location") != base+"/rollouts/"+rb.Rollout {
		t.Fatalf("rollback: %d %s (Location %q)", r.status, r.body, r.header.Get("Location"))
	}
	// The pool shows both what was saved last and what is applied. The
	// operator reads its own write (read-your-writes); another caller sees
	// it as fast as the projection follows (docs/api.md "Consistency").
	var shown struct {
		KubernetesVersion string `json:"kubernetes_version"`
		LatestRevision    int    `json:"latest_revision"`
		Applied           struct {
			Number            int    `json:"number"`
			KubernetesVersion string `json:"kubernetes_version"`
		} `json:"applied"`
	}
	if r := s.do("GET", base+"/pools/workers", tn.operator, nil, nil, &shown); r.status != 200 || shown.LatestRevision != 2 ||
		shown.Applied.Number != 1 || shown.Applied.KubernetesVersion == "" || shown.Applied.KubernetesVersion == shown.KubernetesVersion {
		t.Fatalf("after the rollback the pool shows %+v (%d %s)", shown, r.status, r.body)
	}
	if r := s.do("POST", base+"/pools/workers/revisions/9/apply", tn.operator, nil, nil, nil); r.status != 404 {
		t.Fatalf("apply a missing revision: %d %s", r.status, r.body)
	}
	// the audit log has it all, with the admin as actor
	var events struct {
		Items []struct{ Type, Actor string }
	}
	s.do("GET", base+"/events?aggregate=pool/workers", tn.viewer, nil, nil, &events)
	types := []string{}
	for _, e := range events.Items {
		types = append(types, e.Type)
	}
	if !strings.Contains(strings.Join(types, ","), "pool.apply_requested") || !strings.Contains(events.Items[0].Actor, "admin-bot") {
		t.Fatalf("pool events: %v %+v", types, events.Items)
	}
}
