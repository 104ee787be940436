package service_test

import (
	"strings"
	"testing"
)

// The machine's revisions and startup log, against the real registry,
// revisions and boot services.
func TestMachineRevisionsAndStartupLog(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	uuid := uuidN(7)
	if r := s.do("POST", base+"/machines", tn.operator, map[string]any{"uuid": uuid, "hostname": "w7"}, nil, nil); r.status != 201 {
		t.Fatalf("pre-register: %d %s", r.status, r.body)
	}
	s.waitMachines()
	var mr struct {
		UUID         string
		Pool         string
		Revisions    []struct{ Number int }
		Instructions []any
	}
	// unassigned: no pool revisions, no instructions
	r := s.do("GET", base+"/machines/"+uuid+"/revisions", tn.viewer, nil, nil, &mr)
	if r.status != 200 || mr.UUID != uuid || len(mr.Revisions) != 0 || mr.Instructions == nil || r.header.Get("ETag") == "" {
		t.Fatalf("revisions of an unassigned machine: %d %s", r.status, r.body)
	}
	// a pool with two revisions, and the machine assigned to it
	cluster := map[string]any{"name": "prod", "api_endpoint": "https://api.prod.example:6443", "kubernetes_version": "1.34.1",
		"kubeconfig": "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n", "bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + strings.Repeat("ab", 32)}
	if r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil); r.status != 201 {
		t.Fatalf("cluster: %d %s", r.status, r.body)
	}
	spec := map[string]any{"name": "workers", "cluster": "prod", "display_name": "Workers", "kubernetes": map[string]any{"minor": "1.33"},
		"flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}
	if r := s.do("POST", base+"/pools", tn.admin, spec, nil, nil); r.status != 201 {
		t.Fatalf("pool: %d %s", r.status, r.body)
	}
	delete(spec, "cluster")
	spec["kubernetes"] = map[string]any{"minor": "1.34"}
	if r := s.do("PUT", base+"/pools/workers", tn.admin, spec, nil, nil); r.status != 200 {
		t.Fatalf("pool change: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/machines/"+uuid+"/assign", tn.operator, map[string]any{"pool": "workers"}, nil, nil); r.status != 200 {
		t.Fatalf("assign: %d %s", r.status, r.body)
	}
	s.waitMachines()
	mr.Revisions = nil
	// As the admin who changed the pool: the gateway reads the pool's
	// revisions at least as of that write (another token's read may come
	// before the revisions service applied it).
	r = s.do("GET", base+"/machines/"+uuid+"/revisions", tn.admin, nil, nil, &mr)
	if r.status != 200 || mr.Pool != "workers" || len(mr.Revisions) != 2 || mr.Revisions[1].Number != 2 {
		t.Fatalf("revisions of an assigned machine: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/machines/"+uuidN(70)+"/revisions", tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("revisions of a missing machine: %d %s", r.status, r.body)
	}
	// the agent never reported: 404, and a malformed UUID names the field
	if r := s.do("GET", base+"/machines/"+uuid+"/startup-log", tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("startup log before any report: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/machines/not-a-uuid/startup-log", tn.viewer, nil, nil, nil); r.status != 422 || r.problem().Errors[0].Field != "uuid" {
		t.Fatalf("startup log of a malformed UUID: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/machines/"+uuid+"/startup-log", tn.otherAdmin, nil, nil, nil); r.status != 404 || strings.Contains(string(r.body), "w7") {
		t.Fatalf("another org: %d %s", r.status, r.body)
	}
}
