package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/kubeharness"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	revisions "github.com/anvil-fleet/anvil/services/revisions/service"
)

// stack is the real control plane (devstack: embedded JetStream and all
// five services) with an organization, an enrollment token, a cluster on
// the harness's kube-apiserver and a pool.
type stack struct {
	t       *testing.T
	ctx     context.Context
	nc      *nats.Conn
	reg     regapi.Client
	store   *events.JetStreamStore
	bootURL string
	enroll  string
	cp      *kubeharness.ControlPlane
	logs    *eventstest.SyncBuffer // collects logs; a failed test prints them
	// patience bounds each eventually (default 2 minutes).
	patience time.Duration
}

const (
	org  = "acme"
	pool = "workers"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startStack(t *testing.T) *stack {
	t.Helper()
	cp := kubeharness.Start(t)
	logs := &eventstest.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("SIM_TEST_LOGS") != "" {
			t.Logf("logs (last 30000 bytes):\n%s", tail(logs.String(), 30000))
		}
	})
	bootAddr := freeAddr(t)
	// The boot service serves the simulator's stand-in agent and sysexts
	// for the default catalog: pools are saved only when it has them.
	assets, err := simassets.Dir(t.TempDir(), revisions.DefaultKubernetesVersions...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := devstack.Start(context.Background(), devstack.Config{
		DataDir: t.TempDir(), GatewayAddr: freeAddr(t), BootAddr: bootAddr, AdminToken: "anvil_admin_simtest", AssetsDir: assets,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
	})
	nc, err := st.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	reg := events.NewRegistry()
	reg.RegisterAll(bootapi.EventTypes())
	s := &stack{
		t: t, ctx: events.WithActor(t.Context(), "token:simtest (sim test)"), nc: nc, reg: regapi.Client{NC: nc},
		bootURL: "http://" + bootAddr, cp: cp, logs: logs,
	}
	if s.store, err = events.NewJetStreamStore(s.ctx, js, reg, events.StreamOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}

	// The services answer once they have subscribed.
	s.retry("create the organization", func() error {
		_, err := s.reg.CreateOrg(s.ctx, regapi.OrgCreate{ID: org, DisplayName: "Acme"})
		if err != nil && strings.Contains(err.Error(), "exists") {
			return nil
		}
		return err
	})
	s.retry("issue an enrollment token", func() error {
		tok, err := s.reg.IssueToken(s.ctx, regapi.TokenIssue{Org: org, Kind: regapi.KindEnrollment, Name: "sim"})
		s.enroll = tok.Token
		return err
	})
	s.retry("create the cluster", func() error {
		_, err := revapi.CreateCluster(s.ctx, nc, revapi.CreateClusterRequest{
			Org: org, Name: "c1", APIEndpoint: cp.RESTConfig().Host, KubernetesVersion: "1.34.1",
			Kubeconfig: revapi.Secret(cp.Kubeconfig), BootstrapToken: revapi.Secret("abcdef.0123456789abcdef"),
			CACertHash: "sha256:" + strings.Repeat("ab", 32),
		})
		return err
	})
	s.retry("create the pool", func() error {
		_, err := revapi.CreatePool(s.ctx, nc, revapi.NewCreatePoolRequest(org, pool, "c1", poolSpec("4230.2.3")))
		return err
	})
	return s
}

func poolSpec(flatcar string) revapi.PoolSpec {
	return revapi.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  revapi.Kubernetes{Minor: "1.34"},
		Flatcar:     revapi.Flatcar{Channel: "stable", Version: flatcar},
		NodeLabels:  map[string]string{"anvil.dev/rack": "r12"},
	}
}

// retry runs op until it succeeds (the services may still be starting).
func (s *stack) retry(what string, op func() error) {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := op()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventually polls cond until it holds; the deadline is generous (the
// machine is shared), and only matters on failure.
func (s *stack) eventually(what string, cond func() (bool, string)) {
	s.t.Helper()
	patience := s.patience
	if patience == 0 {
		patience = 2 * time.Minute
	}
	deadline := time.Now().Add(patience)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not reached; last state: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *stack) command(uuid string, c regapi.MachineCommand) {
	s.t.Helper()
	if err := s.tryCommand(uuid, c); err != nil {
		s.t.Fatal(err)
	}
}

// tryCommand sends a machine command, retrying for a while; it is safe to
// call from any goroutine.
func (s *stack) tryCommand(uuid string, c regapi.MachineCommand) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := s.reg.Machine(s.ctx, org, uuid, c, 0)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s %s: %w", uuid, c.CommandType(), err)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) machine(uuid string) (regapi.Machine, error) {
	r, err := s.reg.GetMachine(s.ctx, regapi.MachineGet{Org: org, UUID: uuid})
	return r.Machine, err
}

// newRevision saves a changed pool spec and returns the new revision.
func (s *stack) newRevision(flatcar string) uint64 {
	s.t.Helper()
	var rev uint64
	s.retry("update the pool", func() error {
		c, err := revapi.UpdatePool(s.ctx, s.nc, revapi.NewUpdatePoolRequest(org, pool, poolSpec(flatcar)))
		if err == nil && c.RevisionCreated == 0 {
			return fmt.Errorf("no revision created: %+v", c)
		}
		rev = uint64(c.RevisionCreated)
		return err
	})
	return rev
}

// requestReboot does what the rollout service does: it appends
// RebootRequested to one of its rollout aggregates.
func (s *stack) requestReboot(rollout string, req bootapi.RebootRequested) {
	s.t.Helper()
	if err := s.tryRequestReboot(rollout, req); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) tryRequestReboot(rollout string, req bootapi.RebootRequested) error {
	ref := events.AggregateRef{Org: org, Type: "rollout", ID: rollout}
	_, err := s.store.Append(s.ctx, ref, events.Any, events.New(req)...)
	return err
}

func (s *stack) instruction(uuid, id string) (bootapi.Instruction, error) {
	return bootapi.GetInstruction(s.ctx, s.nc, bootapi.InstructionRef{Org: org, UUID: uuid, InstructionID: id})
}

func (s *stack) node(name string) (*corev1.Node, error) {
	return s.cp.Client.CoreV1().Nodes().Get(s.ctx, name, metav1.GetOptions{})
}

// readyWatch records every Ready status a node is seen with, from a watch,
// so a short NotReady spell cannot be missed by polling, and whether kwok
// let go of it meanwhile.
type readyWatch struct {
	mu      sync.Mutex
	seen    []string // Ready status, then "/" and the reason when False
	kwokOff bool     // seen without the kwok label
}

func (s *stack) watchReady(name string) *readyWatch {
	s.t.Helper()
	w, err := s.cp.Client.CoreV1().Nodes().Watch(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(w.Stop)
	rw := &readyWatch{}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			st := "none"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					st = string(c.Status)
					if c.Status == corev1.ConditionFalse {
						st += "/" + c.Reason
					}
				}
			}
			rw.mu.Lock()
			if len(rw.seen) == 0 || rw.seen[len(rw.seen)-1] != st {
				rw.seen = append(rw.seen, st)
			}
			rw.kwokOff = rw.kwokOff || n.Labels[kubeharness.KwokManagedLabel] != "true"
			rw.mu.Unlock()
		}
	}()
	return rw
}

// sawNotReady: the node was seen with Ready False for reason.
func (rw *readyWatch) sawNotReady(reason string) func() (bool, string) {
	return func() (bool, string) {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		return slices.Contains(rw.seen, string(corev1.ConditionFalse)+"/"+reason), strings.Join(rw.seen, " ")
	}
}

// sawKwokLetGo: the node was seen without the kwok label.
func (rw *readyWatch) sawKwokLetGo() bool {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.kwokOff
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func nodeLabelsString(n *corev1.Node) string {
	if n == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%v ready=%t", n.Labels, kubeharness.NodeIsReady(n))
}
