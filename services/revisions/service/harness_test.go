package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	bootservice "github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	regservice "github.com/anvil-fleet/anvil/services/registry/service"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

// Test fixtures. The credentials are distinctive so that a scan of the log
// or the logs for them cannot match anything else.
var (
	testKey         = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	testKey2        = "k2:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	testKubeconfig  = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: kubeconfig-plaintext-7c1e5d}\n" + testContext
	testKubeconfig2 = "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\nusers:\n- name: drain\n  user: {token: kubeconfig-rotated-9f8e7d}\n" + testContext
	testContext     = "contexts:\n- name: drain@prod\n  context: {cluster: prod, user: drain}\ncurrent-context: drain@prod\n"
	testToken       = "k8sabc.s3cr3tt0k3nv4lu3"
	testToken2      = "k8sdef.r0tat3dt0k3nabcd"
	testCAHash      = "sha256:" + fmt.Sprintf("%064x", 42)
	testSSHKey      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7MFQfcHd1ylZUcKQiI8JWtuQRNG3PWlubfBl1oO9T8 ops@example.com"
	testVersions    = "1.31.9,1.32.7,1.33.1,1.33.4,1.34.1"
	testActor       = "token:t1 (ops)"
)

// harness is one embedded JetStream with the revisions service running on
// it, and a client connection that talks to it only through NATS. The real
// boot service runs beside it, serving the simulator's assets for
// testVersions: the revisions service asks it for the files' hashes before
// it saves or renders a revision. So does the real registry, which the
// service asks whether machines still belong to a pool it deletes.
type harness struct {
	t    testing.TB
	env  *eventstest.Env
	nc   *nats.Conn
	ctx  context.Context // carries the actor
	cfg  service.Config
	logs *eventstest.SyncBuffer
	// assets is the boot service's assets directory.
	assets string
	boot   *bootservice.Service
	// stopBoot stops the boot service (also at cleanup).
	stopBoot func()
	// reg is the registry's client; regs the running registry, which
	// stopRegistry stops (also at cleanup).
	reg          regapi.Client
	regs         *regservice.Service
	stopRegistry func()

	cancel context.CancelFunc
	done   chan error
}

func newHarness(t testing.TB, mod ...func(*service.Config)) *harness {
	t.Helper()
	env := eventstest.Start(t, service.NewRegistry())
	cfg := service.Config{
		Config:             svc.Config{Service: service.Name, LogLevel: "debug"},
		EncryptionKeys:     testKey,
		KubernetesVersions: testVersions,
		BootURL:            "https://boot.anvil.example:8443",
	}
	for _, m := range mod {
		m(&cfg)
	}
	nc := env.Connect(t)
	h := &harness{t: t, env: env, nc: nc, cfg: cfg, logs: &eventstest.SyncBuffer{},
		ctx: events.WithActor(context.Background(), testActor)}
	h.startRegistry()
	h.startBoot()
	h.start()
	t.Cleanup(h.stop)
	return h
}

// startRegistry runs the real registry.
func (h *harness) startRegistry() {
	h.t.Helper()
	h.reg = regapi.Client{NC: h.nc}
	ready := make(chan *regservice.Service, 1)
	cfg := regservice.Config{Config: svc.Config{Service: regservice.Name, StreamReplicas: 1}}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("svc", "registry")
	h.stopRegistry = eventstest.RunService(h.t, "registry", func(ctx context.Context) error {
		return regservice.Start(ctx, cfg, svc.Options{Conn: h.env.Connect(h.t), Logger: log}, regservice.Hooks{Ready: ready})
	}, func() { h.regs = <-ready }, eventstest.RunOptions{StartTimeout: 60 * time.Second, StopTimeout: 30 * time.Second, Logs: h.logs})
}

// startBoot runs the real boot service with the simulator's assets for
// testVersions, its public URL the harness's boot URL.
func (h *harness) startBoot() {
	h.t.Helper()
	var err error
	if h.assets, err = simassets.Dir(h.t.TempDir(), testVersions); err != nil {
		h.t.Fatal(err)
	}
	ready := make(chan *bootservice.Service, 1)
	cfg := bootservice.Config{Config: svc.Config{Service: bootservice.Name}, Listen: "127.0.0.1:0", PublicURL: h.cfg.BootURL,
		AssetsDir: h.assets, SigningKeys: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32)), PrepareWorkers: -1}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("svc", "boot")
	h.stopBoot = eventstest.RunService(h.t, "boot", func(ctx context.Context) error {
		return bootservice.Start(ctx, cfg, svc.Options{Conn: h.env.Connect(h.t), Logger: log}, bootservice.Hooks{Ready: ready})
	}, func() { h.boot = <-ready }, eventstest.RunOptions{StartTimeout: 60 * time.Second, StopTimeout: 30 * time.Second, Logs: h.logs})
}

// start runs the service and waits until it answers.
func (h *harness) start() {
	h.t.Helper()
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > 3*time.Second {
			h.t.Logf("the service took %v to start", d)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { h.done <- service.Run(ctx, h.cfg, svc.Options{Conn: h.env.Conn, Logger: log}) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := api.ListCatalog(h.ctx, h.nc, api.ListCatalogRequest{Org: "acme"})
		if err == nil {
			return
		}
		select {
		case err := <-h.done:
			h.t.Fatalf("service stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("service did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the service and checks that it stopped cleanly.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > 3*time.Second {
			h.t.Logf("the service took %v to stop", d)
		}
	}()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("service.Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Error("service did not stop")
	}
	h.cancel = nil
}

// renderOptions are the options the service renders a revision of
// Kubernetes version with, as the boot service resolves its files.
func (h *harness) renderOptions(version string) render.Options {
	h.t.Helper()
	agent, _ := bootapi.AgentAsset("amd64")
	sysext, _ := bootapi.SysextAsset(version, "x86-64")
	r, err := bootapi.ResolveAssets(h.ctx, h.nc, bootapi.ResolveAssetsRequest{Names: []string{agent, sysext}})
	if err != nil || len(r.Assets) != 2 || r.Assets[0].Status != bootapi.AssetReady || r.Assets[1].Status != bootapi.AssetReady {
		h.t.Fatalf("resolving %s and %s: %+v %v", agent, sysext, r, err)
	}
	return render.Options{BaseURL: h.cfg.BootURL, Arch: "x86-64",
		AgentURL: r.Assets[0].URL, AgentHash: r.Assets[0].Hash, SysextURL: r.Assets[1].URL, SysextHash: r.Assets[1].Hash}
}

// ---- fixtures through the API ----

func (h *harness) createCluster(org, name, cp string) api.Cluster {
	h.t.Helper()
	c, err := api.CreateCluster(h.ctx, h.nc, clusterReq(org, name, cp))
	if err != nil {
		h.t.Fatalf("create cluster %s/%s: %v", org, name, err)
	}
	return c
}

func clusterReq(org, name, cp string) api.CreateClusterRequest {
	return api.CreateClusterRequest{
		Org: org, Name: name, APIEndpoint: "https://api." + name + ".example:6443", KubernetesVersion: cp,
		Kubeconfig: api.Secret(testKubeconfig), BootstrapToken: api.Secret(testToken), CACertHash: testCAHash,
	}
}

func testSpec() api.PoolSpec {
	return api.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  api.Kubernetes{Minor: "1.33"},
		Flatcar:     api.Flatcar{Channel: "stable", Version: "4230.2.3"},
		Network: api.Network{
			Bonds:      []api.Bond{{Name: "bond0", Mode: "802.3ad", Members: []string{"eno1", "eno2"}}},
			VLANs:      []api.VLAN{{ID: 100, Parent: "bond0"}},
			Interfaces: []api.Interface{{Name: "bond0.100", DHCP: "ipv4", MTU: 9000}},
		},
		NodeLabels:       map[string]string{"anvil.dev/rack": "r12"},
		Taints:           []api.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}},
		KubeletExtraArgs: map[string]string{"max-pods": "200"},
		SSHKeys:          []string{testSSHKey},
		Rollout:          api.Rollout{MaxUnavailable: "25%", Pause: "1m"},
	}
}

func (h *harness) createPool(org, name, cluster string, spec api.PoolSpec, apply bool) api.PoolChange {
	h.t.Helper()
	req := api.NewCreatePoolRequest(org, name, cluster, spec)
	req.Apply, req.Message = apply, "first"
	c, err := api.CreatePool(h.ctx, h.nc, req)
	if err != nil {
		h.t.Fatalf("create pool %s/%s: %v", org, name, err)
	}
	return c
}

func (h *harness) getPool(org, name string, minVersion uint64) api.Pool {
	h.t.Helper()
	p, err := api.GetPool(h.ctx, h.nc, api.GetPoolRequest{Org: org, Name: name, MinVersion: minVersion})
	if err != nil {
		h.t.Fatalf("get pool %s/%s: %v", org, name, err)
	}
	return p
}

// logEvents returns every event in the log matching f.
func (h *harness) logEvents(f events.Filter) []events.Envelope {
	h.t.Helper()
	var out []events.Envelope
	err := h.env.Store.Replay(context.Background(), f, events.Position{}, events.Position{}, func(e *events.Envelope) error {
		out = append(out, *e)
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitHandler waits until the platform-revisions handler has acknowledged
// everything it was given.
func (h *harness) waitHandler() {
	h.t.Helper()
	ctx := context.Background()
	head, err := h.env.Store.Head(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cons, err := h.env.JS.Consumer(ctx, events.StreamName, "handler-"+service.PlatformRevisionsHandler)
		if err == nil {
			info, err := cons.Info(ctx)
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= lastCatalogSeq(h, head) {
				return
			}
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			h.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the platform-revisions handler did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastCatalogSeq is the sequence of the newest catalog.version_added at or
// below head (0 if none).
func lastCatalogSeq(h *harness, head uint64) uint64 {
	var last uint64
	for _, e := range h.logEvents(events.Filter{Org: "_platform", AggregateType: "catalog", EventTypes: []string{"catalog.version_added"}}) {
		if e.Sequence <= head {
			last = e.Sequence
		}
	}
	return last
}

// ---- assertions ----

// wantErr checks err's kind and that it names at least the given fields.
func wantErr(t testing.TB, what string, err error, kind errs.Kind, fields ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, kind)
		return
	}
	e := errs.As(err)
	if e.Kind != kind {
		t.Errorf("%s: %v (kind %s), want kind %s", what, err, e.Kind, kind)
		return
	}
	var got []string
	for _, f := range e.Fields {
		got = append(got, f.Field)
	}
	for _, f := range fields {
		if !slices.Contains(got, f) {
			t.Errorf("%s: fields %v do not name %q (%v)", what, got, f, err)
		}
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
