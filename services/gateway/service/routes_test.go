package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

type machineBody struct {
	regapi.Machine
	Version uint64 `json:"version"`
}

func TestMachineRoutes(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	uuid := uuidN(2)
	base := "/api/v1/orgs/acme/machines"

	// pre-register: success, validation naming the fields, conflict
	var m machineBody
	r := s.do("POST", base, tn.operator, map[string]any{"uuid": strings.ToUpper(uuid), "hostname": "worker-2", "labels": map[string]string{"rack": "r1"}, "pool": "workers"}, nil, &m)
	if r.status != 201 || m.UUID != uuid || m.Hostname != "worker-2" || r.header.Get("ETag") != fmt.Sprintf(`"%d"`, m.Version) {
		t.Fatalf("pre-register: %d %s etag %s", r.status, r.body, r.header.Get("ETag"))
	}
	r = s.do("POST", base, tn.operator, map[string]any{"uuid": "nope", "hostname": "Bad_Host!"}, nil, nil)
	if p := r.problem(); r.status != 422 || len(p.Errors) < 2 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("validation: %d %s", r.status, r.body)
	}
	r = s.do("POST", base, tn.operator, map[string]any{"uuid": uuid, "colour": "red"}, nil, nil)
	if p := r.problem(); r.status != 422 || p.Errors[0].Field != "colour" {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	r = s.do("POST", base, tn.operator, `{"uuid": `, nil, nil)
	if r.status != 422 {
		t.Fatalf("broken JSON: %d %s", r.status, r.body)
	}
	r = s.do("POST", base, tn.operator, map[string]any{"uuid": uuid}, nil, nil)
	if r.status != 409 {
		t.Fatalf("pre-register twice: %d %s", r.status, r.body)
	}
	// body limit
	r = s.do("POST", base, tn.operator, `{"uuid":"`+strings.Repeat("a", 70<<10)+`"}`, nil, nil)
	if r.status != 413 {
		t.Fatalf("oversized body: %d", r.status)
	}
	s.waitMachines()

	// get, not found, list with filters and pagination
	r = s.do("GET", base+"/"+uuid, tn.viewer, nil, nil, &m)
	if r.status != 200 || m.Hostname != "worker-2" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	etag := r.header.Get("ETag")
	if r := s.do("GET", base+"/"+uuidN(99), tn.viewer, nil, nil, nil); r.status != 404 {
		t.Fatalf("missing machine: %d", r.status)
	}
	for i := 10; i < 15; i++ {
		s.do("POST", base, tn.operator, map[string]any{"uuid": uuidN(i), "labels": map[string]string{"rack": fmt.Sprint("r", i%2)}}, nil, nil)
	}
	s.waitMachines()
	var page struct {
		Items []regapi.Machine
		Next  string
	}
	seen := 0
	cursor := ""
	for {
		page.Items, page.Next = nil, "" // absent fields leave old values behind
		s.do("GET", base+"?selector=rack%3Dr0&limit=1&cursor="+cursor, tn.viewer, nil, nil, &page)
		seen += len(page.Items)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if seen != 3 { // 10, 12 and 14
		t.Fatalf("selector rack=r0 paged %d machines, want 3", seen)
	}
	if r := s.do("GET", base+"?selector=rack+in+(", tn.viewer, nil, nil, nil); r.status != 422 || !strings.Contains(string(r.body), "selector") {
		t.Fatalf("bad selector: %d %s", r.status, r.body)
	}

	// PATCH with If-Match: success, then the stale ETag gets 412
	r = s.do("PATCH", base+"/"+uuid, tn.operator, map[string]any{"hostname": "worker-2b"}, map[string]string{"If-Match": etag}, &m)
	if r.status != 200 || m.Hostname != "worker-2b" {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	if r := s.do("PATCH", base+"/"+uuid, tn.operator, map[string]any{"hostname": "worker-2c"}, map[string]string{"If-Match": etag}, nil); r.status != 412 {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	if r := s.do("PATCH", base+"/"+uuid, tn.operator, map[string]any{}, nil, nil); r.status != 422 {
		t.Fatalf("empty patch: %d", r.status)
	}
	// actions
	// ?at=before below must fall between the patch and the actions that
	// follow
	before := instantPassed(t)
	// conflict: a machine that never booted cannot enter maintenance, and says why
	if r := s.do("POST", base+"/"+uuid+"/maintenance/on", tn.operator, nil, nil, nil); r.status != 409 || !strings.Contains(r.problem().Detail, "has not booted") {
		t.Fatalf("maintenance before boot: %d %s", r.status, r.body)
	}
	// a pool that does not exist: 404, not a machine waiting forever
	if r := s.do("POST", base+"/"+uuid+"/assign", tn.operator, map[string]any{"pool": "blue"}, nil, nil); r.status != 404 || !strings.Contains(r.problem().Detail, "pool blue does not exist") {
		t.Fatalf("assign to a pool that does not exist: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", base+"/"+uuid+"?policy=sometimes", tn.operator, nil, nil, nil); r.status != 422 {
		t.Fatalf("bad policy: %d %s", r.status, r.body)
	}
	// time travel: the hostname before the patch
	s.waitMachines()
	var then machineBody
	s.do("GET", base+"/"+uuid+"?at="+before.UTC().Format(time.RFC3339Nano), tn.viewer, nil, nil, &then)
	if then.Hostname != "worker-2b" {
		t.Fatalf("as of %s: hostname %q", before, then.Hostname)
	}
	then = machineBody{}
	s.do("GET", base+"/"+uuid+"?at="+strings.Trim(etag, `"`), tn.viewer, nil, nil, &then)
	if then.Hostname != "worker-2" {
		t.Fatalf("as of version %s: hostname %q", etag, then.Hostname)
	}
}

func TestIdempotencyKey(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	body := map[string]any{"uuid": uuidN(3), "hostname": "w3"}
	key := map[string]string{"Idempotency-Key": "create-w3"}
	a := s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, body, key, nil)
	b := s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, body, key, nil)
	if a.status != 201 || b.status != 201 || string(a.body) != string(b.body) || b.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s / %d %s", a.status, a.body, b.status, b.body)
	}
	c := s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, map[string]any{"uuid": uuidN(4)}, key, nil)
	if c.status != 422 {
		t.Fatalf("key reused for another request: %d %s", c.status, c.body)
	}
}

func TestEventsAudit(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	uuid := uuidN(5)
	s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, map[string]any{"uuid": uuid, "hostname": "w5"}, nil, nil)
	s.do("PATCH", "/api/v1/orgs/acme/machines/"+uuid, tn.admin, map[string]any{"labels": map[string]string{"a": "b"}}, nil, nil)
	var page struct {
		Items []struct {
			Sequence  uint64
			Type      string
			Aggregate string
			Actor     string
		}
		Next string
	}
	s.do("GET", "/api/v1/orgs/acme/events?aggregate=machine/"+uuid, tn.viewer, nil, nil, &page)
	if len(page.Items) != 2 || page.Items[0].Type != "machine.preregistered" || page.Items[1].Type != "machine.labels_changed" {
		t.Fatalf("events: %+v", page.Items)
	}
	if !strings.HasPrefix(page.Items[0].Actor, "token:") || !strings.Contains(page.Items[0].Actor, "(operator-bot)") ||
		!strings.Contains(page.Items[1].Actor, "(admin-bot)") {
		t.Fatalf("actors not recorded: %+v", page.Items)
	}
	// paging and filters
	s.do("GET", "/api/v1/orgs/acme/events?limit=1&type=machine.labels_changed,machine.preregistered", tn.viewer, nil, nil, &page)
	if len(page.Items) != 1 || page.Next == "" {
		t.Fatalf("page 1: %+v", page)
	}
	next := page.Next
	page.Items, page.Next = nil, ""
	s.do("GET", "/api/v1/orgs/acme/events?limit=1&type=machine.labels_changed,machine.preregistered&cursor="+next, tn.viewer, nil, nil, &page)
	if len(page.Items) != 1 || page.Items[0].Type != "machine.labels_changed" {
		t.Fatalf("page 2: %+v", page)
	}
	// ?after= is cursor's deprecated alias
	page.Items = nil
	s.do("GET", "/api/v1/orgs/acme/events?limit=1&type=machine.labels_changed,machine.preregistered&after="+next, tn.viewer, nil, nil, &page)
	if len(page.Items) != 1 || page.Items[0].Type != "machine.labels_changed" {
		t.Fatalf("page 2 with after: %+v", page)
	}
	for _, q := range []string{"cursor=x", "after=x", "cursor=" + next + "&after=1"} {
		r := s.do("GET", "/api/v1/orgs/acme/events?"+q, tn.viewer, nil, nil, nil)
		if p := r.problem(); r.status != 422 || len(p.Errors) != 1 || !strings.HasPrefix(q, p.Errors[0].Field) && !strings.Contains(q, "&"+p.Errors[0].Field) {
			t.Fatalf("events?%s: %d %s", q, r.status, r.body)
		}
	}
	page.Items = nil
	s.do("GET", "/api/v1/orgs/acme/events?actor=nobody", tn.viewer, nil, nil, &page)
	if len(page.Items) != 0 {
		t.Fatalf("actor filter: %+v", page.Items)
	}
	if r := s.do("GET", "/api/v1/orgs/acme/events?since=yesterday", tn.viewer, nil, nil, nil); r.status != 422 {
		t.Fatalf("bad since: %d", r.status)
	}
	// another org sees none of it
	if r := s.do("GET", "/api/v1/orgs/acme/events", tn.otherAdmin, nil, nil, nil); r.status != 404 {
		t.Fatalf("cross-org audit: %d", r.status)
	}
}

// A revoked token stops working at once, although the gateway caches
// verified tokens (for an hour in these tests): the revocation's event
// empties the cache.
func TestRevokedTokenRefused(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	var issued regapi.TokenIssued
	if r := s.do("POST", "/api/v1/orgs/acme/tokens", tn.admin, map[string]any{"name": "short-lived", "role": "viewer"}, nil, &issued); r.status != 201 {
		t.Fatalf("issue: %d %s", r.status, r.body)
	}
	s.waitOrgs()
	for range 3 { // verified once, then served from the cache
		if r := s.do("GET", "/api/v1/orgs/acme/machines", issued.Token, nil, nil, nil); r.status != 200 {
			t.Fatalf("new token: %d %s", r.status, r.body)
		}
	}
	if r := s.do("DELETE", "/api/v1/orgs/acme/tokens/"+issued.Info.ID, tn.admin, nil, nil, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.do("GET", "/api/v1/orgs/acme/machines", issued.Token, nil, nil, nil)
		if r.status == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked token still works: %d", r.status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// and stays refused once the quiet period after the event is over,
	// when the token cache caches verified tokens again
	s.waitTokenCaching(tn.viewer)
	if r := s.do("GET", "/api/v1/orgs/acme/machines", issued.Token, nil, nil, nil); r.status != 401 {
		t.Fatalf("the revoked token came back: %d", r.status)
	}
}
