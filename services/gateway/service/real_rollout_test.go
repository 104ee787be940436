package service_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// The rollout routes against the real rollout service. The test has no
// Kubernetes cluster, so the rollout's sanity checks fail (the cluster is
// unreachable) and it stops as failed, having touched nothing: enough to
// see every route answer with the service's real data, validated against
// the OpenAPI document.
func TestRolloutRoutesWithRolloutService(t *testing.T) {
	s := startStack(t, withRollout)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	cluster := map[string]any{"name": "prod", "api_endpoint": "https://127.0.0.1:1", "kubernetes_version": "1.34.1",
		"kubeconfig":      "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n",
		"bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + strings.Repeat("ab", 32)}
	if r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil); r.status != 201 {
		t.Fatalf("cluster: %d %s", r.status, r.body)
	}
	spec := map[string]any{"name": "workers", "cluster": "prod", "display_name": "Workers", "kubernetes": map[string]any{"minor": "1.33"},
		"flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}
	if r := s.do("POST", base+"/pools", tn.admin, spec, nil, nil); r.status != 201 {
		t.Fatalf("pool: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/machines", tn.operator, map[string]any{"uuid": uuidN(8), "hostname": "w8", "pool": "workers"}, nil, nil); r.status != 201 {
		t.Fatalf("machine: %d %s", r.status, r.body)
	}
	s.waitMachines()

	var ro rolloutapi.Rollout
	r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "workers"}, nil, &ro)
	if r.status != 201 || ro.ID == "" || ro.Pool != "workers" || r.header.Get("ETag") == "" {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	one := base + "/rollouts/" + ro.ID
	deadline := time.Now().Add(30 * time.Second)
	for ro.Status != "failed" {
		if time.Now().After(deadline) {
			t.Fatalf("the rollout did not stop on its failed checks: %+v", ro)
		}
		time.Sleep(50 * time.Millisecond)
		s.do("GET", one, tn.viewer, nil, nil, &ro)
	}
	if !strings.Contains(ro.Reason, "cluster_reachable") || len(ro.Checks) == 0 {
		t.Fatalf("failed rollout: %+v", ro)
	}
	var list rolloutapi.RolloutList
	if r := s.do("GET", base+"/rollouts?pool=workers", tn.viewer, nil, nil, &list); r.status != 200 || len(list.Items) != 1 || list.Items[0].ID != ro.ID {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	// a failed rollout cannot be paused; a stale If-Match is 412; a missing one 404
	if r := s.do("POST", one+"/pause", tn.operator, nil, nil, nil); r.status != 409 {
		t.Fatalf("pause a failed rollout: %d %s", r.status, r.body)
	}
	if r := s.do("POST", one+"/abort", tn.operator, nil, map[string]string{"If-Match": `"1"`}, nil); r.status != 412 {
		t.Fatalf("stale abort: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/rollouts/ro-nope", tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("missing rollout: %d %s", r.status, r.body)
	}
	var op rolloutapi.Operation
	if r := s.do("GET", base+"/operations/"+ro.ID, tn.viewer, nil, nil, &op); r.status != 200 || op.Kind != "rollout" || op.Status != "failed" {
		t.Fatalf("operation: %d %s", r.status, r.body)
	}
	var ops rolloutapi.OperationList
	if r := s.do("GET", base+"/operations?kind=rollout", tn.viewer, nil, nil, &ops); r.status != 200 || len(ops.Items) == 0 {
		t.Fatalf("operations: %d %s", r.status, r.body)
	}
	var page rolloutapi.LogPage
	if r := s.do("GET", base+"/operations/"+ro.ID+"/log", tn.viewer, nil, nil, &page); r.status != 200 || len(page.Entries) == 0 {
		t.Fatalf("log: %d %s", r.status, r.body)
	}
	// the stream replays the log and says the status
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch, res := openStream(t, ctx, s.base+base+"/operations/"+ro.ID+"/log", tn.viewer, nil)
	if res.StatusCode != 200 {
		t.Fatalf("stream: %d", res.StatusCode)
	}
	for i := range page.Entries {
		if ev := next(t, ch); ev.id != itoa(i) {
			t.Fatalf("stream event %d: %+v", i, ev)
		}
	}
	if ev := next(t, ch); !(ev.event == "status" && strings.Contains(ev.data, `"failed"`) || ev.event == "end") {
		t.Fatalf("after the log: %+v", ev)
	}
	// abort ends it for good
	if r := s.do("POST", one+"/abort", tn.operator, map[string]any{"reason": "test"}, nil, &ro); r.status != 200 {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
