package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/sim"
)

// The rollout and operation routes and the startup log, against the real
// rollout service driving two simulated machines (the real agent) whose
// nodes are in a real kube-apiserver (kubeharness): rollouts that run to
// success, their logs live, pause and resume, time travel, and the
// startup log an agent reported. Every answer is validated against the
// OpenAPI document.
func TestRolloutsWithFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and a simulated fleet")
	}
	cp := kubeharness.Start(t)
	s := startStack(t, forKube)
	tn := s.tenants()
	base := "/api/v1/orgs/acme"

	cluster := map[string]any{"name": "prod", "api_endpoint": cp.RESTConfig().Host, "kubernetes_version": "1.37.1",
		"kubeconfig": string(cp.Kubeconfig), "bootstrap_token": "abcdef.0123456789abcdef", "ca_cert_hash": "sha256:" + strings.Repeat("ab", 32)}
	if r := s.do("POST", base+"/clusters", tn.admin, cluster, nil, nil); r.status != 201 {
		t.Fatalf("cluster: %d %s", r.status, r.body)
	}
	// two machines pre-registered into the pool, booted by the simulator:
	// they register and wait for the pool's first revision
	fleet, err := sim.New(sim.Config{BootURL: s.boot, EnrollmentToken: tn.enroll, Kube: cp.Client,
		RebootTime: 1500 * time.Millisecond, MaxWait: 200 * time.Millisecond, AgentIntervals: sim.TestIntervals(), StateDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for i := 1; i <= 2; i++ {
		u := uuidN(100 + i)
		if r := s.do("POST", base+"/machines", tn.operator, map[string]any{"uuid": u, "hostname": fmt.Sprintf("fw%d", i), "pool": "workers"}, nil, nil); r.status != 201 {
			t.Fatalf("pre-register: %d %s", r.status, r.body)
		}
		fleet.Add(u, fmt.Sprintf("52:54:00:00:fe:%02x", i))
		uuids = append(uuids, u)
	}
	if err := fleet.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	for _, u := range uuids {
		s.eventually("machine "+u+" pending", func() (bool, string) {
			var m struct{ Status string }
			r := s.do("GET", base+"/machines/"+u, tn.viewer, nil, nil, &m)
			return m.Status == "pending", string(r.body)
		})
	}

	// Save & Apply: the first rollout provisions both
	spec := func(gen string) map[string]any {
		return map[string]any{"display_name": "Workers", "kubernetes": map[string]any{"minor": "1.37"},
			"flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}, "node_labels": map[string]any{"anvil.dev/gen": gen},
			"rollout": map[string]any{"max_unavailable": 1}}
	}
	create := spec("1")
	create["name"], create["cluster"], create["apply"] = "workers", "prod", true
	if r := s.do("POST", base+"/pools", tn.admin, create, nil, nil); r.status != 201 {
		t.Fatalf("save & apply: %d %s", r.status, r.body)
	}
	first := s.waitRollout(tn.viewer, 1, nil, "succeeded")

	// the startup log the simulated agent reported on its boot
	var sl bootapi.StartupLog
	s.eventually("a startup log", func() (bool, string) {
		r := s.do("GET", base+"/machines/"+strings.ToUpper(uuids[0])+"/startup-log", tn.viewer, nil, nil, &sl)
		return r.status == 200 && len(sl.Lines) > 0 && sl.BootedRevision != "", string(r.body)
	})
	if sl.UUID != uuids[0] || sl.Org != "acme" || sl.ReportedAt.IsZero() || !strings.HasPrefix(sl.BootedRevision, "mr-") {
		t.Fatalf("startup log: %+v", sl)
	}
	if r := s.do("GET", base+"/machines/"+uuids[0]+"/startup-log", tn.otherAdmin, nil, nil, nil); r.status != 404 || strings.Contains(string(r.body), "mr-") {
		t.Fatalf("another org's startup log: %d %s", r.status, r.body)
	}

	// revision 2, saved without applying, rolled out by hand to one machine
	if r := s.do("PUT", base+"/pools/workers", tn.admin, spec("2"), nil, nil); r.status != 200 || !strings.Contains(string(r.body), `"revision_created":2`) {
		t.Fatalf("save revision 2: %d %s", r.status, r.body)
	}
	var one rolloutapi.Rollout
	startOne := map[string]any{"pool": "workers", "revision": 2, "machine": strings.ToUpper(uuids[0])}
	r := s.do("POST", base+"/rollouts", tn.operator, startOne, map[string]string{"Idempotency-Key": "one-1"}, &one)
	if r.status != 201 || one.ID == "" || one.Revision != 2 || r.header.Get("ETag") == "" || !strings.Contains(one.RequestedBy, "(operator-bot)") {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	var again rolloutapi.Rollout
	if r := s.do("POST", base+"/rollouts", tn.operator, startOne, map[string]string{"Idempotency-Key": "one-1"}, &again); r.status != 201 ||
		again.ID != one.ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("idempotent start: %d %s", r.status, r.body)
	}
	if r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "missing"}, nil, nil); r.status != 404 {
		t.Fatalf("start on a missing pool: %d %s", r.status, r.body)
	}

	// its log, live: entries as they happen, its status, and the end
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	url := s.base + base + "/operations/" + one.ID + "/log"
	ch, res := openStream(t, ctx, url, tn.viewer, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header)
	}
	var entries []sseEvent
	statuses := 0
	for {
		ev := next(t, ch)
		if ev.event == "end" {
			if !strings.Contains(ev.data, `"succeeded"`) {
				t.Fatalf("end: %+v", ev)
			}
			break
		}
		switch ev.event {
		case "status":
			statuses++
		case "":
			if ev.id != itoa(len(entries)) {
				t.Fatalf("entry %d has id %s: %+v", len(entries), ev.id, ev)
			}
			entries = append(entries, ev)
		default:
			t.Fatalf("unexpected event: %+v", ev)
		}
	}
	joined := fmt.Sprint(entries)
	if statuses == 0 || len(entries) < 3 || !strings.Contains(joined, `"fw1"`) || !strings.Contains(joined, `"uncordon"`) || strings.Contains(joined, `"fw2"`) {
		t.Fatalf("the live log (%d status events): %s", statuses, joined)
	}
	if _, open := <-ch; open {
		t.Fatal("the stream goes on after its end")
	}
	// Last-Event-ID resumes after the last event received
	ch, _ = openStream(t, ctx, url, tn.viewer, map[string]string{"Last-Event-ID": itoa(len(entries) - 2)})
	if ev := next(t, ch); ev.id != itoa(len(entries)-1) || ev.data != entries[len(entries)-1].data {
		t.Fatalf("resumed: %+v", ev)
	}
	if ev := next(t, ch); ev.event != "end" {
		t.Fatalf("resumed end: %+v", ev)
	}
	var ro rolloutapi.Rollout
	if r := s.do("GET", base+"/rollouts/"+one.ID, tn.viewer, nil, nil, &ro); r.status != 200 || ro.Status != "succeeded" || len(ro.Machines) != 1 || ro.Machines[0].UUID != uuids[0] {
		t.Fatalf("the one-machine rollout: %d %s", r.status, r.body)
	}

	// revision 3 to the whole pool: pause it while it runs, then resume
	if r := s.do("PUT", base+"/pools/workers", tn.admin, spec("3"), nil, nil); r.status != 200 {
		t.Fatalf("save revision 3: %d %s", r.status, r.body)
	}
	var all rolloutapi.Rollout
	if r := s.do("POST", base+"/rollouts", tn.operator, map[string]any{"pool": "workers"}, nil, &all); r.status != 201 || all.Revision != 3 {
		t.Fatalf("start the whole pool: %d %s", r.status, r.body)
	}
	allURL := base + "/rollouts/" + all.ID
	s.eventually("the rollout runs", func() (bool, string) {
		r := s.do("GET", allURL, tn.viewer, nil, nil, &ro)
		return ro.Status == "running", string(r.body)
	})
	// ?at=running below must name an instant before the pause
	running := instantPassed(t).UTC()
	if r := s.do("POST", allURL+"/pause", tn.operator, map[string]any{"reason": "lunch"}, nil, &ro); r.status != 200 || ro.Status != "paused" || r.header.Get("ETag") == "" {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	// The operator's next read is at least as new as the pause
	// (read-your-writes, though another rollout replica may lag): the
	// gateway asks the rollout service for the pause's version, and a
	// viewer who wrote nothing asks for none.
	asked := make(chan rolloutapi.GetRequest, 8)
	spy, err := s.nc.Subscribe(rolloutapi.SubjectGet, func(m *nats.Msg) {
		var req rolloutapi.GetRequest
		if json.Unmarshal(m.Data, &req) == nil && req.ID == all.ID {
			asked <- req
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who  string
		tok  string
		want uint64
	}{{"the operator who paused", tn.operator, ro.Version}, {"a viewer", tn.viewer, 0}} {
		var again rolloutapi.Rollout
		if r := s.do("GET", allURL, tc.tok, nil, nil, &again); r.status != 200 || again.Status != "paused" {
			t.Fatalf("%s reads the paused rollout: %d %s", tc.who, r.status, r.body)
		}
		select {
		case req := <-asked:
			if req.MinVersion != tc.want {
				t.Fatalf("a read by %s asked for version %d, want %d", tc.who, req.MinVersion, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a read by %s did not reach the rollout service", tc.who)
		}
	}
	if err := spy.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if r := s.do("POST", allURL+"/resume", tn.operator, nil, map[string]string{"If-Match": `"1"`}, nil); r.status != 412 {
		t.Fatalf("stale If-Match: %d %s", r.status, r.body)
	}
	if r := s.do("POST", allURL+"/retry", tn.operator, nil, nil, nil); r.status != 409 {
		t.Fatalf("retry a paused rollout: %d %s", r.status, r.body)
	}
	if r := s.do("POST", allURL+"/pause", tn.viewer, nil, nil, nil); r.status != 403 {
		t.Fatalf("a viewer pauses: %d", r.status)
	}
	var then rolloutapi.Rollout
	if r := s.do("GET", allURL+"?at="+running.Format(time.RFC3339Nano), tn.viewer, nil, nil, &then); r.status != 200 || then.Status != "running" {
		t.Fatalf("the rollout before the pause: %d %s", r.status, r.body)
	}
	if r := s.do("POST", allURL+"/resume", tn.operator, "  ", nil, &ro); r.status != 200 || ro.Status != "running" {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	s.eventually("the resumed rollout succeeds", func() (bool, string) {
		r := s.do("GET", allURL, tn.viewer, nil, nil, &ro)
		return ro.Status == "succeeded", string(r.body)
	})
	if ro.Progress.Done != 2 || ro.Progress.Total != 2 {
		t.Fatalf("whole pool: %+v", ro.Progress)
	}
	if r := s.do("POST", allURL+"/abort", tn.operator, nil, nil, nil); r.status != 409 {
		t.Fatalf("abort a finished rollout: %d %s", r.status, r.body)
	}

	// lists and operations, with the real data
	var list rolloutapi.RolloutList
	if r := s.do("GET", base+"/rollouts?pool=workers&limit=10", tn.viewer, nil, nil, &list); r.status != 200 || len(list.Items) != 3 || list.Items[0].ID != all.ID {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var ids []string
	for _, it := range list.Items {
		ids = append(ids, it.ID)
	}
	if !slices.Contains(ids, first) || !slices.Contains(ids, one.ID) {
		t.Fatalf("list: %v", ids)
	}
	if r := s.do("GET", base+"/rollouts?pool=workers&status=active", tn.viewer, nil, nil, &list); r.status != 200 || len(list.Items) != 0 {
		t.Fatalf("active: %d %s", r.status, r.body)
	}
	var ops rolloutapi.OperationList
	if r := s.do("GET", base+"/operations?kind=rollout&pool=workers", tn.viewer, nil, nil, &ops); r.status != 200 || len(ops.Items) != 3 {
		t.Fatalf("operations: %d %s", r.status, r.body)
	}
	var op rolloutapi.Operation
	if r := s.do("GET", base+"/operations/"+all.ID, tn.viewer, nil, nil, &op); r.status != 200 || op.Rollout == nil || op.Status != "succeeded" ||
		op.LogLength < 4 || r.header.Get("ETag") == "" {
		t.Fatalf("operation: %d %s", r.status, r.body)
	}
	var page rolloutapi.LogPage
	if r := s.do("GET", base+"/operations/"+all.ID+"/log?after=1&limit=2", tn.viewer, nil, nil, &page); r.status != 200 || len(page.Entries) != 2 || page.Next != 3 {
		t.Fatalf("log page: %d %s", r.status, r.body)
	}
	if !strings.Contains(string(s.do("GET", base+"/operations/"+all.ID+"/log", tn.viewer, nil, nil, nil).body), "lunch") {
		t.Fatal("the log does not record the pause's reason")
	}
}

// eventually polls cond until it holds (the machine is shared: generous).
func (s *stack) eventually(what string, cond func() (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not reached; last: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRollout waits for a rollout of pool workers to revision that is
// not one of known, until it has status; it returns its id.
func (s *stack) waitRollout(tok string, revision uint64, known []string, status string) string {
	s.t.Helper()
	var id string
	s.eventually(fmt.Sprintf("a rollout to revision %d %s", revision, status), func() (bool, string) {
		var list rolloutapi.RolloutList
		r := s.do("GET", "/api/v1/orgs/acme/rollouts?pool=workers", tok, nil, nil, &list)
		for _, ro := range list.Items {
			if ro.Revision == revision && !slices.Contains(known, ro.ID) {
				id = ro.ID
				return string(ro.Status) == status, string(r.body)
			}
		}
		return false, string(r.body)
	})
	return id
}
