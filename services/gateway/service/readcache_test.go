package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// The gateway keeps the registry's machine and page answers (its read
// cache) until the registry says they changed: the test stack keeps them
// for an hour otherwise, so each read below that sees a change made past
// the gateway (another service's command, a heartbeat) shows that the
// registry's change notice reached the cache.
func TestReadCacheFollowsTheRegistry(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	uuid := uuidN(7)
	if r := s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, map[string]any{"uuid": uuid, "hostname": "w7", "labels": map[string]string{"rack": "r1"}}, nil, nil); r.status != 201 {
		t.Fatalf("pre-register: %d %s", r.status, r.body)
	}
	one, page := "/api/v1/orgs/acme/machines/"+uuid, "/api/v1/orgs/acme/machines?selector=rack%3Dr1&limit=10"
	type machine struct {
		Hostname string    `json:"hostname"`
		LastSeen time.Time `json:"last_seen"`
		Version  uint64    `json:"version"`
	}
	read := func(tok string) (machine, string) {
		t.Helper()
		var m machine
		r := s.do("GET", one, tok, nil, nil, &m)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", one, r.status, r.body)
		}
		var p struct{ Items []machine }
		if r := s.do("GET", page, tok, nil, nil, &p); r.status != 200 || len(p.Items) != 1 {
			t.Fatalf("GET %s: %d %s", page, r.status, r.body)
		}
		if fmt.Sprint(r.header.Get("ETag")) != fmt.Sprintf("%q", fmt.Sprint(m.Version)) {
			t.Fatalf("ETag %s for version %d", r.header.Get("ETag"), m.Version)
		}
		return m, p.Items[0].Hostname
	}
	// Read-your-writes holds per caller: the viewer (not the operator who
	// wrote) may read before the registry's projection has the machine.
	s.eventually("the viewer sees the pre-registered machine", func() (bool, string) {
		r := s.do("GET", one, tn.viewer, nil, nil, nil)
		return r.status == 200, fmt.Sprintf("GET %s: %d", one, r.status)
	})
	// the viewer's reads fill the cache, and read it again
	var first machine
	for range 3 {
		m, listed := read(tn.viewer)
		if m.Hostname != "w7" || listed != "w7" {
			t.Fatalf("hostname %q, listed %q; want w7", m.Hostname, listed)
		}
		first = m
	}

	// A change the gateway never saw: another service's command.
	reg := regapi.Client{NC: s.nc}
	ctx := context.Background()
	if _, err := reg.Machine(ctx, "acme", uuid, regapi.SetHostname{Hostname: "w7-renamed"}, 0); err != nil {
		t.Fatal(err)
	}
	s.eventually("the viewer reads the new hostname, one machine and page alike", func() (bool, string) {
		m, listed := read(tn.viewer)
		return m.Hostname == "w7-renamed" && listed == "w7-renamed", fmt.Sprintf("hostname %q, listed %q", m.Hostname, listed)
	})

	// A heartbeat moves last_seen: the machine's own answer shows it. (A
	// machine heartbeats once it booted: it self-registers first.)
	if _, err := reg.SelfRegister(ctx, regapi.SelfRegister{EnrollmentToken: tn.enroll, UUID: uuid, MAC: "52:54:00:00:00:07"}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	if err := reg.Heartbeat(ctx, regapi.Heartbeat{Org: "acme", UUID: uuid, At: at}); err != nil {
		t.Fatal(err)
	}
	s.eventually("the viewer reads the heartbeat's last_seen", func() (bool, string) {
		m, _ := read(tn.viewer)
		return m.LastSeen.Equal(at), fmt.Sprintf("last_seen %s, want %s", m.LastSeen, at)
	})

	// Read-your-writes: the operator's own change is in its very next
	// reads, whatever the cache held.
	read(tn.operator)
	for i := range 5 {
		name := fmt.Sprintf("w7-%d", i)
		if r := s.do("PATCH", one, tn.operator, map[string]any{"hostname": name}, nil, nil); r.status != 200 {
			t.Fatalf("PATCH: %d %s", r.status, r.body)
		}
		if m, listed := read(tn.operator); m.Hostname != name || listed != name {
			t.Fatalf("after its own PATCH to %s the operator read %q, listed %q", name, m.Hostname, listed)
		}
	}

	// A read of the past is never the cache's.
	var past machine
	if r := s.do("GET", fmt.Sprintf("%s?at=%d", one, first.Version), tn.viewer, nil, nil, &past); r.status != 200 || past.Hostname != "w7" {
		t.Fatalf("GET ?at=%d: %d %s", first.Version, r.status, r.body)
	}
}
