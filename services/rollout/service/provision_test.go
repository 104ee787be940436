package service_test

import (
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/sim"
)

// selfProvisioning: a machine that becomes pending in a pool that was
// applied already provisions itself, with no rollout started by hand: a
// pre-registered one when it boots, and a self-registered one (no
// hostname: its node is named by its UUID) when it is assigned. Neither is
// cordoned or drained. A pool rollout started while a machine provisions
// leaves it out, and the machine catches up with the newly applied
// revision once it is provisioned.
func selfProvisioning(s *stack) {
	org, pool := "prov", "prov"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	s.machines(org, pool, fleet, 1)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))

	// A pre-registered machine boots into the applied pool.
	pre := s.preregister(org, pool, fleet, "0a0a0a0a-0000-4000-8000-000000000002", pool+"-late")
	var provisioned api.Rollout
	s.eventually("the pre-registered machine provisions itself", 3*time.Minute, func() (bool, string) {
		r, ok := s.rolloutOf(org, pre.UUID())
		if !ok {
			return false, "no rollout holds it"
		}
		provisioned = r
		m := s.registryMachines(org, pool)[pre.Hostname()]
		return r.Status == api.StatusSucceeded && m.Status == regapi.StatusReady && m.CurrentRevision == 1,
			fmt.Sprintf("rollout %s %s; machine %s at %d", r.ID, r.Status, m.Status, m.CurrentRevision)
	})
	if !strings.HasPrefix(provisioned.RequestedBy, "machine:"+pre.UUID()+" (provisioning") || provisioned.Progress.Total != 1 {
		s.t.Fatalf("provisioning rollout %+v requested by %q", provisioned.Progress, provisioned.RequestedBy)
	}
	for _, l := range s.log(org, provisioned.ID) {
		if f := strings.Fields(l); len(f) > 2 && (f[2] == "cordon" || f[2] == "drain") {
			s.t.Fatalf("a machine that never joined is not cordoned or drained: %s", l)
		}
	}

	// A machine that registers itself (no hostname) and is assigned.
	const uuid = "0b0b0b0b-0000-4000-8000-000000000bae"
	fleet.Add(uuid, "52:54:00:0b:0b:0b")
	s.eventually("the unnamed machine registers", 2*time.Minute, func() (bool, string) {
		r, err := s.reg.GetMachine(s.ctx, regapi.MachineGet{Org: org, UUID: uuid})
		return err == nil && r.Machine.Status == regapi.StatusReadyUnassigned, fmt.Sprint(err)
	})
	r, err := s.reg.Machine(s.ctx, org, uuid, regapi.AssignToPool{Pool: pool}, 0)
	must(s.t, err)
	if r.Machine.NodeName != uuid {
		s.t.Fatalf("an unnamed machine's node name is its UUID, got %q", r.Machine.NodeName)
	}
	s.eventually("the assigned machine provisions itself and its node is named by its UUID", 3*time.Minute, func() (bool, string) {
		got, err := s.reg.GetMachine(s.ctx, regapi.MachineGet{Org: org, UUID: uuid})
		if err != nil {
			return false, err.Error()
		}
		n, nerr := s.cp.Client.CoreV1().Nodes().Get(s.ctx, uuid, metav1.GetOptions{})
		return got.Machine.Status == regapi.StatusReady && nerr == nil && n.Name == uuid,
			fmt.Sprintf("%s, node: %v", got.Machine.Status, nerr)
	})
}

// nodeFollowsMachine: unassign (after a drain), force-unassign and a
// forced deletion each end with the machine's Node deleted from its
// cluster, and the operation log says so.
func nodeFollowsMachine(s *stack) {
	org, pool := "follow", "follow"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, pool, fleet, 3)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))
	must(s.t, s.cp.CreateNamespace(s.ctx, "follow-shop"))
	_, err := s.cp.CreatePods(s.ctx, kubeharness.Pods{Namespace: "follow-shop", Name: "web", Nodes: []string{pool + "-m01"}})
	must(s.t, err)

	cases := []struct {
		m    int
		cmd  regapi.MachineCommand
		kind string
	}{
		{0, regapi.Unassign{}, api.KindUnassign},
		{1, regapi.ForceUnassign{}, api.KindForceUnassignCleanup},
		{2, regapi.Delete{Policy: regapi.DeletionForced}, api.KindForcedDeletionCleanup},
	}
	for _, c := range cases {
		m := ms[c.m]
		// Powered off for good, so the simulator does not register the
		// node again.
		m.NeverJoin(true)
		_, err := s.reg.Machine(s.ctx, org, m.UUID(), c.cmd, 0)
		must(s.t, err)
		s.eventually(c.kind+": the node of "+m.Hostname()+" is deleted", 2*time.Minute, func() (bool, string) {
			_, err := s.cp.Client.CoreV1().Nodes().Get(s.ctx, m.Hostname(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		var op api.Operation
		s.eventually(c.kind+" operation succeeds", time.Minute, func() (bool, string) {
			ops, err := s.api.ListOperations(s.ctx, api.ListRequest{Org: org, Kind: c.kind})
			if err != nil || len(ops.Items) == 0 {
				return false, fmt.Sprint(err)
			}
			op = ops.Items[0]
			return op.Machine == m.UUID() && op.Status == "succeeded", string(op.Status)
		})
		full, err := s.api.GetOperation(s.ctx, api.GetRequest{Org: org, ID: op.ID})
		must(s.t, err)
		var said bool
		for _, e := range full.Log {
			said = said || (e.Step == "delete_node" && strings.Contains(e.Message, "node "+m.Hostname()+" deleted"))
		}
		if !said {
			s.t.Fatalf("%s: the operation log does not say the node was deleted: %+v", c.kind, full.Log)
		}
	}
	if pods, err := s.cp.PodsOnNode(s.ctx, pool+"-m01", nil); err != nil || len(pods) != 0 {
		s.t.Fatalf("the unassigned machine's pods were drained before its node went: %d left (%v)", len(pods), err)
	}
}

// preregister pre-registers one machine of pool and adds it to fleet.
func (s *stack) preregister(org, pool string, fleet *sim.Fleet, uuid, host string) *sim.Machine {
	s.t.Helper()
	r, err := s.reg.Machine(s.ctx, org, uuid, regapi.PreRegister{UUID: uuid, Hostname: host, Pool: pool}, 0)
	must(s.t, err)
	must(s.t, s.regs.Machines.WaitFor(s.ctx, r.Version))
	return fleet.Add(uuid, "52:54:00:0a:0a:02")
}

// rolloutOf returns the newest rollout that holds the machine.
func (s *stack) rolloutOf(org, uuid string) (api.Rollout, bool) {
	list, err := s.api.List(s.ctx, api.ListRequest{Org: org, Limit: 500})
	if err != nil {
		return api.Rollout{}, false
	}
	for _, r := range list.Items {
		full, err := s.api.Get(s.ctx, api.GetRequest{Org: org, ID: r.ID})
		if err != nil {
			continue
		}
		for _, m := range full.Machines {
			if m.UUID == uuid {
				return full, true
			}
		}
	}
	return api.Rollout{}, false
}
