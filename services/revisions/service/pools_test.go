package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

func TestPoolCommands(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")

	// create ("Save"): one revision, nothing applied
	c := h.createPool("acme", "workers", "prod", testSpec(), false)
	p := c.Pool
	if !c.Changed || c.RevisionCreated != 1 || c.ApplyRequested != 0 || p.LatestRevision != 1 || p.AppliedRevision != 0 ||
		p.KubernetesVersion != "1.33.4" || p.Spec.Kubernetes.Version != "1.33.4" || p.Spec.Rollout.DrainTimeout != "15m0s" ||
		len(p.Revisions) != 1 || p.Revisions[0].Author != testActor || p.Revisions[0].Message != "first" || p.Version == 0 {
		t.Fatalf("created: %s", mustJSON(t, c))
	}
	_, err := api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "workers", "prod", testSpec()))
	wantErr(t, "create twice", err, errs.KindConflict)
	_, err = api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "other", "nope", testSpec()))
	wantErr(t, "create on a missing cluster", err, errs.KindNotFound)

	// validation names every field, including one that does not convert
	bad := testSpec()
	bad.Flatcar.Channel = "edge"
	bad.Network.VLANs[0].ID = 5000
	bad.Rollout.Pause = "soon"
	bad.DisplayName = ""
	_, err = api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "Bad_Name", "prod", bad))
	wantErr(t, "create invalid", err, errs.KindValidation, "name", "flatcar.channel", "network.vlans[0].id", "rollout.pause", "display_name")
	bad.Rollout.Pause = ""
	_, err = api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "bad", "prod", bad))
	wantErr(t, "create invalid (domain only)", err, errs.KindValidation, "flatcar.channel", "network.vlans[0].id", "display_name")
	_, err = command.Call[map[string]any, api.PoolChange](ctx, nc, api.SubjectPoolCreate, map[string]any{
		"org": "acme", "name": "x", "cluster": "prod", "rollout": map[string]any{"max_unavailable": true}, "colour": "red"})
	wantErr(t, "create with a wrong type", err, errs.KindValidation, "rollout.max_unavailable")
	_, err = command.Call[map[string]any, api.PoolChange](ctx, nc, api.SubjectPoolCreate, map[string]any{"org": "acme", "colour": "red"})
	wantErr(t, "create with an unknown field", err, errs.KindValidation, "colour")
	minor := testSpec()
	minor.Kubernetes.Minor = "1.29"
	_, err = api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "old", "prod", minor))
	wantErr(t, "create on an unsupported minor", err, errs.KindValidation, "kubernetes.minor")

	// update: unchanged → nothing; settings only → no revision; config → exactly one
	same, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", testSpec(), func(r *api.UpdatePoolRequest) { r.ExpectedVersion = p.Version }))
	if err != nil || same.Changed || same.Pool.Version != p.Version {
		t.Fatalf("unchanged update: %s %v", mustJSON(t, same), err)
	}
	settings := testSpec()
	settings.DisplayName = "Database workers"
	settings.Rollout.MaxUnavailable = "2"
	s, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "workers", settings))
	if err != nil || !s.SettingsChanged || s.RevisionCreated != 0 || s.Pool.LatestRevision != 1 || s.Pool.Spec.DisplayName != "Database workers" || s.Pool.Spec.Rollout.MaxUnavailable != "2" {
		t.Fatalf("settings update: %s %v", mustJSON(t, s), err)
	}
	reboot := settings
	reboot.NodeLabels = map[string]string{"anvil.dev/rack": "r13"}
	r2, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", reboot, func(r *api.UpdatePoolRequest) { r.Message = "move rack"; r.ExpectedVersion = s.Pool.Version }))
	if err != nil || r2.RevisionCreated != 2 || r2.SettingsChanged || r2.ApplyRequested != 0 || r2.Pool.LatestRevision != 2 || r2.Pool.AppliedRevision != 0 {
		t.Fatalf("reboot update: %s %v", mustJSON(t, r2), err)
	}
	if n := len(h.logEvents(events.Filter{Org: "acme", AggregateType: "pool", AggregateID: "workers", EventTypes: []string{"pool.revision_created"}})); n != 2 {
		t.Fatalf("revision_created events = %d, want 2", n)
	}
	_, err = api.UpdatePool(ctx, nc, updReq("acme", "workers", testSpec(), func(r *api.UpdatePoolRequest) { r.ExpectedVersion = s.Pool.Version }))
	wantErr(t, "update stale", err, errs.KindPrecondition)
	_, err = api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "nope", testSpec()))
	wantErr(t, "update missing", err, errs.KindNotFound)
	bad = testSpec()
	bad.SSHKeys = []string{"ssh-rsa nope"}
	_, err = api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "", bad))
	wantErr(t, "update invalid", err, errs.KindValidation, "name", "ssh_keys[0]")

	// Save & Apply: a new revision and its apply request, in the log
	apply := reboot
	apply.NodeLabels = map[string]string{"anvil.dev/rack": "r14"}
	r3, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", apply, func(r *api.UpdatePoolRequest) { r.Apply = true }))
	if err != nil || r3.RevisionCreated != 3 || r3.ApplyRequested != 3 || r3.Rollback || r3.Pool.AppliedRevision != 3 {
		t.Fatalf("save & apply: %s %v", mustJSON(t, r3), err)
	}
	applied := h.logEvents(events.Filter{Org: "acme", AggregateType: "pool", AggregateID: "workers", EventTypes: []string{"pool.apply_requested"}})
	if len(applied) != 1 {
		t.Fatalf("apply_requested events = %d, want 1", len(applied))
	}
	var ar pool.ApplyRequested
	if err := json.Unmarshal(applied[0].Payload, &ar); err != nil || ar.Revision != 3 || ar.Pool != "workers" || ar.Cluster != "prod" || ar.RequestedBy != testActor || ar.Hash == "" {
		t.Fatalf("apply_requested payload: %+v %v", ar, err)
	}
	if applied[0].Actor != testActor {
		t.Fatalf("apply_requested actor = %q", applied[0].Actor)
	}
	again, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", apply, func(r *api.UpdatePoolRequest) { r.Apply = true }))
	if err != nil || again.Changed {
		t.Fatalf("Save & Apply of an unchanged form must be a no-op: %s %v", mustJSON(t, again), err)
	}

	// apply_revision: rollback to 1, re-apply, roll forward
	rb, err := api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1, ExpectedVersion: r3.Pool.Version})
	if err != nil || rb.ApplyRequested != 1 || !rb.Rollback || rb.Pool.AppliedRevision != 1 {
		t.Fatalf("rollback: %s %v", mustJSON(t, rb), err)
	}
	re, err := api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1})
	if err != nil || re.ApplyRequested != 1 || re.Rollback || re.Pool.Version <= rb.Pool.Version {
		t.Fatalf("re-apply: %s %v", mustJSON(t, re), err)
	}
	fw, err := api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 3})
	if err != nil || fw.ApplyRequested != 3 || fw.Rollback {
		t.Fatalf("roll forward: %s %v", mustJSON(t, fw), err)
	}
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 9})
	wantErr(t, "apply a missing revision", err, errs.KindNotFound)
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "nope", Revision: 1})
	wantErr(t, "apply on a missing pool", err, errs.KindNotFound)
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 0})
	wantErr(t, "apply invalid", err, errs.KindValidation, "revision")
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1, ExpectedVersion: r3.Pool.Version})
	wantErr(t, "apply stale", err, errs.KindPrecondition)
	// A revision whose kubelet would now break the skew policy: revision 2
	// of edge-workers is on 1.33.4, revision 3 back on 1.32.7, and then
	// the control plane goes back to 1.33.1.
	edge := h.createCluster("acme", "edge", "1.34.1")
	old := testSpec()
	old.Kubernetes.Minor = "1.32"
	h.createPool("acme", "edge-workers", "edge", old, false)                                         // 1.32.7
	e2, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "edge-workers", testSpec())) // 1.33.4
	if err != nil || e2.RevisionCreated != 2 {
		t.Fatalf("edge update: %v", err)
	}
	if _, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "edge-workers", old)); err != nil { // back to 1.32.7 (rev 3)
		t.Fatal(err)
	}
	if _, err := api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "acme", Name: "edge", KubernetesVersion: ptr("1.33.1"), ExpectedVersion: edge.Version}); err != nil {
		t.Fatalf("lower the control plane: %v", err)
	}
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "edge-workers", Revision: 2})
	wantErr(t, "apply a revision that breaks the skew policy", err, errs.KindConflict)

	// get, list
	got := h.getPool("acme", "workers", fw.Pool.Version)
	if got.AppliedRevision != 3 || got.LatestRevision != 3 || len(got.Revisions) != 3 || !got.Revisions[2].Applied || got.Revisions[1].Message != "move rack" {
		t.Fatalf("get: %s", mustJSON(t, got))
	}
	_, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "nope"})
	wantErr(t, "get missing", err, errs.KindNotFound)
	_, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "ACME", Name: "workers"})
	wantErr(t, "get invalid", err, errs.KindValidation, "org")
	list, err := api.ListPools(ctx, nc, api.ListPoolsRequest{Org: "acme"})
	if err != nil || len(list.Pools) != 2 || list.Pools[0].Name != "edge-workers" || list.Pools[1].AppliedRevision != 3 {
		t.Fatalf("list: %s %v", mustJSON(t, list), err)
	}
	list, err = api.ListPools(ctx, nc, api.ListPoolsRequest{Org: "acme", Cluster: "prod"})
	if err != nil || len(list.Pools) != 1 || list.Pools[0].Name != "workers" {
		t.Fatalf("list of one cluster: %s %v", mustJSON(t, list), err)
	}
	_, err = api.ListPools(ctx, nc, api.ListPoolsRequest{Org: "acme", Cluster: "Prod"})
	wantErr(t, "list invalid", err, errs.KindValidation, "cluster")

	// delete
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers", ExpectedVersion: r3.Pool.Version})
	wantErr(t, "delete stale", err, errs.KindPrecondition)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "nope"})
	wantErr(t, "delete missing", err, errs.KindNotFound)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "x.y"})
	wantErr(t, "delete invalid", err, errs.KindValidation, "name")
	del, err := api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers", ExpectedVersion: fw.Pool.Version})
	if err != nil || del.Version <= fw.Pool.Version {
		t.Fatalf("delete: %+v %v", del, err)
	}
	_, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", MinVersion: del.Version})
	wantErr(t, "get deleted", err, errs.KindNotFound)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"})
	wantErr(t, "delete twice", err, errs.KindConflict)
	_, err = api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "workers", testSpec()))
	wantErr(t, "update deleted", err, errs.KindConflict)
	_, err = api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "acme", Pool: "workers", Revision: 1})
	wantErr(t, "apply on a deleted pool", err, errs.KindConflict)
	_, err = api.ListRevisions(ctx, nc, api.ListRevisionsRequest{Org: "acme", Pool: "workers"})
	wantErr(t, "revisions of a deleted pool", err, errs.KindNotFound)
	_, err = api.CreatePool(ctx, nc, api.NewCreatePoolRequest("acme", "workers", "prod", testSpec()))
	wantErr(t, "reuse a deleted name", err, errs.KindConflict)
}

// TestConcurrentUpdates: 20 saves of one pool at once, each with its own
// config, through NATS. Revision numbers come from the pool's folded
// state; the optimistic append refuses all but one writer per number, and
// the losers re-decide. Numbers are unique and contiguous.
func TestConcurrentUpdates(t *testing.T) {
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)

	const writers = 20
	var wg sync.WaitGroup
	results := make([]api.PoolChange, writers)
	failures := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := testSpec()
			spec.NodeLabels = map[string]string{"anvil.dev/writer": string(rune('a' + i))}
			results[i], failures[i] = api.UpdatePool(h.ctx, h.nc, api.NewUpdatePoolRequest("acme", "workers", spec))
		}()
	}
	wg.Wait()
	ok := 0
	numbers := map[int]bool{}
	for i, err := range failures {
		if err != nil {
			// Only a bounded number of lost races may refuse a writer.
			wantErr(t, "concurrent update", err, errs.KindConflict)
			continue
		}
		ok++
		n := results[i].RevisionCreated
		if n < 2 || numbers[n] {
			t.Fatalf("writer %d got revision %d (seen: %v)", i, n, numbers)
		}
		numbers[n] = true
	}
	t.Logf("%d of %d concurrent saves succeeded; the rest lost the race %d times in a row", ok, writers, app.MaxAttempts)
	if ok < 2 {
		t.Fatalf("only %d writers succeeded", ok)
	}
	// In the log: numbers 1..N, each once, in order.
	var got []int
	for _, e := range h.logEvents(events.Filter{Org: "acme", AggregateType: "pool", AggregateID: "workers", EventTypes: []string{"pool.revision_created"}}) {
		var rc pool.RevisionCreated
		if err := json.Unmarshal(e.Payload, &rc); err != nil {
			t.Fatal(err)
		}
		got = append(got, rc.Revision.Number)
	}
	if len(got) != ok+1 {
		t.Fatalf("%d revisions in the log, want %d", len(got), ok+1)
	}
	for i, n := range got {
		if n != i+1 {
			t.Fatalf("revision numbers in the log: %v", got)
		}
	}
	list, err := api.ListRevisions(context.Background(), h.nc, api.ListRevisionsRequest{Org: "acme", Pool: "workers", MinVersion: lastVersion(results)})
	if err != nil || len(list.Revisions) != ok+1 {
		t.Fatalf("list revisions: %d %v", len(list.Revisions), err)
	}
}

func lastVersion(rs []api.PoolChange) uint64 {
	var v uint64
	for _, r := range rs {
		v = max(v, r.Pool.Version)
	}
	return v
}

func updReq(org, name string, spec api.PoolSpec, set func(*api.UpdatePoolRequest)) api.UpdatePoolRequest {
	r := api.NewUpdatePoolRequest(org, name, spec)
	set(&r)
	return r
}

// TestDeletePoolWithMachines: the service asks the registry how many
// machines still belong to a pool and refuses to delete it while any do,
// naming how many and what to do; machines of other pools do not count.
// With the registry down the deletion is unavailable, not done unchecked.
func TestDeletePoolWithMachines(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")
	workers := h.createPool("acme", "workers", "prod", testSpec(), false)
	o, err := h.reg.CreateOrg(ctx, regapi.OrgCreate{ID: "acme", DisplayName: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	// the registry takes machines of an org its projection holds
	if err := h.regs.Orgs.WaitFor(ctx, o.Version); err != nil {
		t.Fatal(err)
	}
	// preregister puts a machine in a pool; waitMachines waits until the
	// registry's list, which the service reads, shows the write
	preregister := func(i int, pool string) uint64 {
		t.Helper()
		r, err := h.reg.Machine(ctx, "acme", machineUUID(i), regapi.PreRegister{UUID: machineUUID(i), Pool: pool}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Version
	}
	waitMachines := func(version uint64) {
		t.Helper()
		if _, err := h.reg.ListMachines(ctx, regapi.MachineList{Org: "acme", MinVersion: version, Limit: 1}); err != nil {
			t.Fatal(err)
		}
	}
	preregister(1, "workers")
	preregister(2, "other") // another pool's machine does not count
	waitMachines(preregister(3, "workers"))

	deleted := func() []events.Envelope {
		return h.logEvents(events.Filter{Org: "acme", AggregateType: "pool", AggregateID: "workers", EventTypes: []string{"pool.deleted"}})
	}
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"})
	wantErr(t, "delete a pool with 2 machines", err, errs.KindConflict)
	t.Logf("refused: %v", err)
	if msg := errs.As(err).Message; !strings.Contains(msg, "2 machines") || !strings.Contains(msg, "unassign them first") {
		t.Errorf("the refusal does not say how many machines or what to do: %q", msg)
	}
	// with the version it has: still refused (not a precondition failure)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers", ExpectedVersion: workers.Pool.Version})
	wantErr(t, "delete a pool with 2 machines, If-Match", err, errs.KindConflict)

	// one unassigned (a pre-registered machine has nothing to drain), one
	// deleted: then the pool goes
	r, err := h.reg.Machine(ctx, "acme", machineUUID(1), regapi.Unassign{}, 0)
	if err != nil || r.Machine.Pool != "" {
		t.Fatalf("unassign: %+v %v", r, err)
	}
	waitMachines(r.Version)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"})
	wantErr(t, "delete a pool with 1 machine", err, errs.KindConflict)
	if msg := errs.As(err).Message; !strings.Contains(msg, "1 machine ") || !strings.Contains(msg, "unassign it first") {
		t.Errorf("the refusal of one machine: %q", msg)
	}
	if d := deleted(); len(d) != 0 {
		t.Fatalf("a refused deletion appended %d pool.deleted", len(d))
	}
	r, err = h.reg.Machine(ctx, "acme", machineUUID(3), regapi.Delete{}, 0)
	if err != nil || !r.Deleted {
		t.Fatalf("delete machine: %+v %v", r, err)
	}
	waitMachines(r.Version)
	del, err := api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers", ExpectedVersion: workers.Pool.Version})
	if err != nil || del.Version <= workers.Pool.Version || len(deleted()) != 1 {
		t.Fatalf("delete the emptied pool: %+v %v", del, err)
	}

	// the registry down: a deletion is unavailable and deletes nothing; a
	// pool that is missing or already deleted is answered without it
	h.createPool("acme", "blue", "prod", testSpec(), false)
	h.stopRegistry()
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "blue"})
	wantErr(t, "delete with the registry down", err, errs.KindUnavailable)
	t.Logf("unavailable: %v", err)
	if msg := errs.As(err).Message; !strings.Contains(msg, "not deleted") {
		t.Errorf("the unavailable answer does not say the pool was kept: %q", msg)
	}
	if p := h.getPool("acme", "blue", 0); p.Deleted {
		t.Fatal("the pool was deleted unchecked")
	}
	if n := len(h.logEvents(events.Filter{Org: "acme", AggregateType: "pool", AggregateID: "blue", EventTypes: []string{"pool.deleted"}})); n != 0 {
		t.Fatalf("%d pool.deleted of blue with the registry down", n)
	}
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "nope"})
	wantErr(t, "delete missing, registry down", err, errs.KindNotFound)
	_, err = api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"})
	wantErr(t, "delete twice, registry down", err, errs.KindConflict)
}

func machineUUID(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i) }
