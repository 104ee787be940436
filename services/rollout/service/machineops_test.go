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
)

// maintenanceAndDelete: maintenance and a graceful delete run the same
// cordon and drain path as rollouts, each as an Operation with its log.
func maintenanceAndDelete(s *stack) {
	org, pool := "ops", "ops"
	tok := s.org(org)
	s.cluster(org, "c1")
	fleet := s.fleetFor(tok, nil)
	ms := s.machines(org, pool, fleet, 2)
	s.createPool(org, pool, "c1", poolSpec("1", steady("1")))
	must(s.t, s.cp.CreateNamespace(s.ctx, "ops-shop"))
	_, err := s.cp.CreatePods(s.ctx, kubeharness.Pods{Namespace: "ops-shop", Name: "web", Nodes: []string{pool + "-m01", pool + "-m02"}})
	must(s.t, err)

	command := func(uuid string, c regapi.MachineCommand) {
		s.t.Helper()
		r, err := s.reg.Machine(s.ctx, org, uuid, c, 0)
		must(s.t, err)
		must(s.t, s.regs.Machines.WaitFor(s.ctx, r.Version))
	}
	status := func(uuid string) string {
		r, err := s.reg.GetMachine(s.ctx, regapi.MachineGet{Org: org, UUID: uuid})
		if err != nil {
			return err.Error()
		}
		return string(r.Machine.Status)
	}

	// Maintenance on: cordon and drain, then the registry says maintenance.
	m1 := ms[0].UUID()
	command(m1, regapi.SetMaintenance{Enabled: true})
	s.eventually("m01 in maintenance", time.Minute, func() (bool, string) { st := status(m1); return st == "maintenance", st })
	if c := s.cordoned(pool + "-"); len(c) != 1 || c[0] != pool+"-m01" {
		s.t.Fatalf("cordoned %v", c)
	}
	pods, err := s.cp.PodsOnNode(s.ctx, pool+"-m01", nil)
	must(s.t, err)
	if len(pods) != 0 {
		s.t.Fatalf("%d pods left on m01 in maintenance", len(pods))
	}
	// The operation's last event follows the registry's status change,
	// and its read model follows the log: wait for it to say succeeded.
	var ops api.OperationList
	s.eventually("the maintenance operation succeeded", time.Minute, func() (bool, string) {
		ops, err = s.api.ListOperations(s.ctx, api.ListRequest{Org: org, Kind: "machine"})
		if err != nil {
			return false, err.Error()
		}
		return len(ops.Items) == 1 && ops.Items[0].Kind == api.KindMaintenanceEnter && ops.Items[0].Status == "succeeded", fmt.Sprintf("%+v", ops.Items)
	})
	op, err := s.api.GetOperation(s.ctx, api.GetRequest{Org: org, ID: ops.Items[0].ID})
	must(s.t, err)
	var steps []string
	for _, e := range op.Log {
		steps = append(steps, string(e.Step)+" "+e.Outcome)
	}
	if got := strings.Join(steps, ", "); got != " started, cordon started, cordon succeeded, drain started, drain succeeded, complete started, complete succeeded,  succeeded" {
		s.t.Fatalf("maintenance log: %s", got)
	}

	// Maintenance off: uncordoned, ready again.
	command(m1, regapi.SetMaintenance{Enabled: false})
	s.eventually("m01 uncordoned", time.Minute, func() (bool, string) {
		c := s.cordoned(pool + "-")
		return len(c) == 0, strings.Join(c, ",")
	})
	if st := status(m1); st != "ready" {
		s.t.Fatalf("m01 is %s after maintenance", st)
	}

	// A graceful delete of m02: cordon, drain, then the node is removed
	// and the machine is gone.
	m2 := ms[1].UUID()
	fleet.Machine(m2).NeverJoin(true) // powered off for good: its node must not come back
	command(m2, regapi.Delete{Policy: regapi.DeletionGraceful})
	s.eventually("m02 deleted", time.Minute, func() (bool, string) {
		st := status(m2)
		return strings.Contains(st, "does not exist") || strings.Contains(st, "not found"), st
	})
	_, err = s.cp.Client.CoreV1().Nodes().Get(s.ctx, pool+"-m02", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		s.t.Fatalf("node m02 after the delete: %v", err)
	}
	// The operation succeeds once the machine is gone: wait for its last
	// event to reach the read model.
	s.eventually("the deletion operation succeeded", time.Minute, func() (bool, string) {
		ops, err = s.api.ListOperations(s.ctx, api.ListRequest{Org: org, Kind: api.KindDeletion})
		if err != nil {
			return false, err.Error()
		}
		return len(ops.Items) == 1 && ops.Items[0].Status == "succeeded" && ops.Items[0].Machine == m2, fmt.Sprintf("%+v", ops.Items)
	})
}
