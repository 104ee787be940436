package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

type deletedMachine struct {
	machineBody
	Deleted bool `json:"deleted"`
}

// Every DELETE answers 200 with the resource as the deletion left it, and
// the deletion's version as its ETag.
func TestDeleteAnswersWhatWasDeleted(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	ctx := context.Background()
	base := "/api/v1/orgs/acme"
	etagOf := func(v uint64) string { return fmt.Sprintf(`"%d"`, v) }

	// a machine with nothing to drain is removed at once, by any policy
	for _, policy := range []string{"", "?policy=graceful", "?policy=unsafe", "?policy=forced"} {
		uuid := uuidN(40 + len(policy))
		if r := s.do("POST", base+"/machines", tn.operator, map[string]any{"uuid": uuid, "hostname": "spare", "labels": map[string]string{"rack": "r4"}}, nil, nil); r.status != 201 {
			t.Fatalf("pre-register: %d %s", r.status, r.body)
		}
		var m deletedMachine
		r := s.do("DELETE", base+"/machines/"+uuid+policy, tn.operator, nil, nil, &m)
		if r.status != 200 || !m.Deleted || m.UUID != uuid || m.Org != "acme" || m.Hostname != "spare" || m.Labels["rack"] != "r4" ||
			m.Status != regapi.StatusPreregistered || m.Version == 0 || r.header.Get("ETag") != etagOf(m.Version) {
			t.Fatalf("DELETE%s: %d %s (ETag %s)", policy, r.status, r.body, r.header.Get("ETag"))
		}
		if r := s.do("DELETE", base+"/machines/"+uuid+policy, tn.operator, nil, nil, nil); r.status != 404 {
			t.Fatalf("DELETE%s again: %d %s", policy, r.status, r.body)
		}
	}

	// a machine with a node: a graceful deletion answers it in status
	// deleting (not yet removed); a forced one removes it, as it last was
	reg := regapi.Client{NC: s.nc}
	uuid := uuidN(50)
	if _, err := reg.SelfRegister(ctx, regapi.SelfRegister{EnrollmentToken: tn.enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:50"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []regapi.MachineCommand{regapi.AssignToPool{Pool: "workers"}, regapi.SetTargetRevision{Revision: 1}} {
		if _, err := reg.Machine(ctx, "acme", uuid, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	var m deletedMachine
	r := s.do("DELETE", base+"/machines/"+uuid, tn.operator, nil, nil, &m)
	if r.status != 200 || m.Deleted || m.UUID != uuid || m.Status != regapi.StatusDeleting || m.Deletion == nil || m.Deletion.Policy != regapi.DeletionGraceful {
		t.Fatalf("graceful DELETE of a machine with a node: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(r.body), `"uuid":"`+uuid+`"`) || strings.Contains(string(r.body), `"deleted"`) {
		t.Fatalf("graceful DELETE body: %s", r.body)
	}
	m = deletedMachine{}
	r = s.do("DELETE", base+"/machines/"+uuid+"?policy=forced", tn.operator, nil, nil, &m)
	if r.status != 200 || !m.Deleted || m.UUID != uuid || m.Pool != "workers" || m.Status != regapi.StatusDeleting || m.MAC != "aa:bb:cc:dd:ee:50" {
		t.Fatalf("forced DELETE: %d %s", r.status, r.body)
	}

	// a pool and a cluster, as they were
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: kubeconfig-plaintext-7c1e5d}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n"
	if r := s.do("POST", base+"/clusters", tn.admin, map[string]any{"name": "prod", "api_endpoint": "https://api.prod.example:6443", "kubernetes_version": "1.34.1",
		"kubeconfig": kubeconfig, "bootstrap_token": "k8sabc.s3cr3tt0k3nv4lu3", "ca_cert_hash": "sha256:" + fmt.Sprintf("%064x", 42)}, nil, nil); r.status != 201 {
		t.Fatalf("create cluster: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/pools", tn.admin, map[string]any{"name": "blue", "cluster": "prod", "display_name": "Blue",
		"kubernetes": map[string]any{"minor": "1.33"}, "flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}, nil, nil); r.status != 201 {
		t.Fatalf("create pool: %d %s", r.status, r.body)
	}
	// a pool that still has a machine is kept (409, naming how many and
	// what to do); the token's own list reads its write (min_version), so
	// the registry the revisions service asks has applied it too
	spare := uuidN(60)
	if r := s.do("POST", base+"/machines", tn.operator, map[string]any{"uuid": spare, "pool": "blue"}, nil, nil); r.status != 201 {
		t.Fatalf("pre-register into blue: %d %s", r.status, r.body)
	}
	var inBlue struct{ Items []machineBody }
	if r := s.do("GET", base+"/machines?pool=blue", tn.operator, nil, nil, &inBlue); r.status != 200 || len(inBlue.Items) != 1 {
		t.Fatalf("blue's machines: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", base+"/pools/blue", tn.admin, nil, nil, nil); r.status != 409 || !strings.Contains(string(r.body), "1 machine") ||
		!strings.Contains(string(r.body), "unassign it first") {
		t.Fatalf("DELETE a pool with a machine: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", base+"/machines/"+spare, tn.operator, nil, nil, nil); r.status != 200 {
		t.Fatalf("DELETE blue's machine: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base+"/machines?pool=blue", tn.operator, nil, nil, &inBlue); r.status != 200 || len(inBlue.Items) != 0 {
		t.Fatalf("blue's machines after the deletion: %d %s", r.status, r.body)
	}
	var pool struct {
		Name, Cluster, Org string
		Deleted            bool
		Version            uint64
		Revisions          []struct{ Number int }
	}
	r = s.do("DELETE", base+"/pools/blue", tn.admin, nil, nil, &pool)
	if r.status != 200 || !pool.Deleted || pool.Name != "blue" || pool.Cluster != "prod" || pool.Org != "acme" || len(pool.Revisions) != 1 ||
		r.header.Get("ETag") != etagOf(pool.Version) {
		t.Fatalf("DELETE pool: %d %s", r.status, r.body)
	}
	var cluster struct {
		Name        string
		APIEndpoint string `json:"api_endpoint"`
		Deleted     bool
		Version     uint64
	}
	r = s.do("DELETE", base+"/clusters/prod", tn.admin, nil, nil, &cluster)
	if r.status != 200 || !cluster.Deleted || cluster.Name != "prod" || cluster.APIEndpoint != "https://api.prod.example:6443" || r.header.Get("ETag") != etagOf(cluster.Version) || strings.Contains(string(r.body), "kubeconfig-plaintext") {
		t.Fatalf("DELETE cluster: %d %s", r.status, r.body)
	}
	// names of pools and clusters are never reused: deleting again is a conflict
	if r := s.do("DELETE", base+"/pools/blue", tn.admin, nil, nil, nil); r.status != 409 {
		t.Fatalf("DELETE pool again: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", base+"/clusters/prod", tn.admin, nil, nil, nil); r.status != 409 {
		t.Fatalf("DELETE cluster again: %d %s", r.status, r.body)
	}

	// a token, revoked
	var issued regapi.TokenIssued
	s.do("POST", base+"/enrollment-tokens", tn.admin, map[string]any{"name": "old-rack"}, nil, &issued)
	var revoked regapi.TokenInfo
	r = s.do("DELETE", base+"/enrollment-tokens/"+issued.Info.ID, tn.admin, nil, nil, &revoked)
	if r.status != 200 || revoked.ID != issued.Info.ID || revoked.Name != "old-rack" || revoked.Status != regapi.TokenRevoked {
		t.Fatalf("DELETE enrollment token: %d %s", r.status, r.body)
	}
}

// An enrollment token's max_machines is set at creation, validated, shown,
// and enforced; the firmware of a machine over the cap reads why.
func TestEnrollmentTokenCap(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/enrollment-tokens", map[string]any{"max_machines": -1}},
		{"/enrollment-tokens", map[string]any{"max_machines": 1_000_001}},
		{"/enrollment-tokens", map[string]any{"max_machines": "ten"}},
		{"/tokens", map[string]any{"role": "viewer", "max_machines": 3}},
	} {
		r := s.do("POST", base+tc.path, tn.admin, tc.body, nil, nil)
		if p := r.problem(); r.status != 422 || len(p.Errors) != 1 || p.Errors[0].Field != "max_machines" {
			t.Fatalf("POST %s %v: %d %s", tc.path, tc.body, r.status, r.body)
		}
	}
	var issued regapi.TokenIssued
	if r := s.do("POST", base+"/enrollment-tokens", tn.admin, map[string]any{"name": "rack-2", "max_machines": 2}, nil, &issued); r.status != 201 ||
		issued.Info.MaxMachines != 2 || issued.Info.RegisteredMachines == nil || *issued.Info.RegisteredMachines != 0 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	s.waitOrgs()

	// machines boot through the boot service, as firmware does; what its
	// console shows is the script's echo lines, joined
	ipxe := func(i int) string {
		t.Helper()
		q := url.Values{"uuid": {uuidN(60 + i)}, "mac": {fmt.Sprintf("aa:bb:cc:dd:ee:%02x", i)}, "token": {issued.Token}}
		res, err := http.Get(s.boot + "/ipxe?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || !strings.HasPrefix(string(b), "#!ipxe") {
			t.Fatalf("/ipxe: %d %s", res.StatusCode, b)
		}
		var console []string
		for _, line := range strings.Split(string(b), "\n") {
			if msg, ok := strings.CutPrefix(line, "echo anvil: "); ok {
				console = append(console, msg)
			}
		}
		return strings.Join(console, " ")
	}
	for i := range 2 {
		if script := ipxe(i); !strings.Contains(script, "is registered in organization acme") {
			t.Fatalf("machine %d:\n%s", i, script)
		}
	}
	script := ipxe(2)
	if !strings.Contains(script, "max_machines is 2") || !strings.Contains(script, "issue another enrollment token") {
		t.Fatalf("the firmware over the cap reads:\n%s", script)
	}
	t.Logf("the firmware over the cap reads:\n%s", script)
	if script := ipxe(0); !strings.Contains(script, "is registered in organization acme") {
		t.Fatalf("a registered machine boots again:\n%s", script)
	}

	var list struct{ Items []regapi.TokenInfo }
	s.do("GET", base+"/enrollment-tokens", tn.admin, nil, nil, &list)
	found := false
	for _, it := range list.Items {
		if it.ID == issued.Info.ID {
			found = true
			if it.MaxMachines != 2 || it.RegisteredMachines == nil || *it.RegisteredMachines != 2 {
				t.Fatalf("listed as %s", mustJSON(it))
			}
		}
	}
	if !found {
		t.Fatal("the token is not listed")
	}
}

func mustJSON(v any) string { return fmt.Sprintf("%+v", v) }
