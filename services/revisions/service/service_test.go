package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

// TestTimeTravel: a pool's state as of a sequence or an instant between
// two updates is what it was then, rebuilt from the log.
func TestTimeTravel(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	cl := h.createCluster("acme", "prod", "1.34.1")
	created := h.createPool("acme", "workers", "prod", testSpec(), false)

	s1 := testSpec()
	s1.NodeLabels = map[string]string{"anvil.dev/rack": "r13"}
	s1.DisplayName = "After one"
	u1, err := api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("acme", "workers", s1))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	between := time.Now()
	time.Sleep(30 * time.Millisecond)
	s2 := s1
	s2.NodeLabels = map[string]string{"anvil.dev/rack": "r14"}
	s2.DisplayName = "After two"
	u2, err := api.UpdatePool(ctx, nc, updReq("acme", "workers", s2, func(r *api.UpdatePoolRequest) { r.Apply = true }))
	if err != nil {
		t.Fatal(err)
	}

	for _, at := range []string{strconv.FormatUint(u1.Pool.Version, 10), between.UTC().Format(time.RFC3339Nano)} {
		p, err := api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: at})
		if err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
		want := u1.Pool
		want.Version, want.UpdatedAt = p.Version, p.UpdatedAt // compared below
		if mustJSON(t, p) != mustJSON(t, want) {
			t.Fatalf("at %s:\n got %s\nwant %s", at, mustJSON(t, p), mustJSON(t, want))
		}
		if p.Version != u1.Pool.Version || !p.UpdatedAt.Equal(u1.Pool.UpdatedAt) || p.Spec.DisplayName != "After one" || p.LatestRevision != 2 || p.AppliedRevision != 0 {
			t.Fatalf("at %s: %s", at, mustJSON(t, p))
		}
	}
	// At the creation, and now.
	p, err := api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: strconv.FormatUint(created.Pool.Version, 10)})
	if err != nil || p.LatestRevision != 1 || p.Spec.DisplayName != "Workers" {
		t.Fatalf("at creation: %s %v", mustJSON(t, p), err)
	}
	p, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil || p.Version != u2.Pool.Version || p.AppliedRevision != 3 {
		t.Fatalf("now: %s %v", mustJSON(t, p), err)
	}
	// Before the pool existed.
	_, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: strconv.FormatUint(cl.Version, 10)})
	wantErr(t, "before creation", err, errs.KindNotFound)
	// A deleted pool can still be looked at as it was.
	del, err := api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "acme", Name: "workers"})
	if err != nil {
		t.Fatal(err)
	}
	p, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: strconv.FormatUint(del.Version, 10)})
	if err != nil || !p.Deleted {
		t.Fatalf("at deletion: %s %v", mustJSON(t, p), err)
	}
	p, err = api.GetPool(ctx, nc, api.GetPoolRequest{Org: "acme", Name: "workers", At: strconv.FormatUint(u2.Pool.Version, 10)})
	if err != nil || p.Deleted || p.AppliedRevision != 3 {
		t.Fatalf("before deletion: %s %v", mustJSON(t, p), err)
	}
	// Clusters too.
	c, err := api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", At: between.UTC().Format(time.RFC3339Nano)})
	if err != nil || c.Version != cl.Version {
		t.Fatalf("cluster at: %+v %v", c, err)
	}
}

// TestOrgIsolation: nothing of one organization is read or changed through
// another's requests, even with the same names.
func TestOrgIsolation(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	a := h.createCluster("acme", "prod", "1.34.1")
	ap := h.createPool("acme", "workers", "prod", testSpec(), false)

	// globex sees nothing of acme's
	l, err := api.ListClusters(ctx, nc, api.ListClustersRequest{Org: "globex", MinVersion: ap.Pool.Version})
	if err != nil || len(l.Clusters) != 0 {
		t.Fatalf("globex clusters: %+v %v", l, err)
	}
	pl, err := api.ListPools(ctx, nc, api.ListPoolsRequest{Org: "globex"})
	if err != nil || len(pl.Pools) != 0 {
		t.Fatalf("globex pools: %+v %v", pl, err)
	}
	for what, err := range map[string]error{
		"get cluster":            second(api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "globex", Name: "prod"})),
		"get cluster at":         second(api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "globex", Name: "prod", At: strconv.FormatUint(a.Version, 10)})),
		"credentials":            second(api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "globex", Cluster: "prod"})),
		"get pool":               second(api.GetPool(ctx, nc, api.GetPoolRequest{Org: "globex", Name: "workers"})),
		"get pool at":            second(api.GetPool(ctx, nc, api.GetPoolRequest{Org: "globex", Name: "workers", At: strconv.FormatUint(ap.Pool.Version, 10)})),
		"revisions":              second(api.ListRevisions(ctx, nc, api.ListRevisionsRequest{Org: "globex", Pool: "workers"})),
		"revision":               second(api.GetRevision(ctx, nc, api.GetRevisionRequest{Org: "globex", Pool: "workers", Revision: 1})),
		"diff":                   second(api.DiffRevisions(ctx, nc, api.DiffRevisionsRequest{Org: "globex", Pool: "workers", From: 1, To: 1})),
		"preview":                second(api.PreviewIgnition(ctx, nc, api.RevisionIgnitionRequest{Org: "globex", Pool: "workers", Revision: 1})),
		"render":                 second(api.RenderMachine(ctx, nc, api.RenderMachineRequest{Org: "globex", Pool: "workers", Revision: 1, Hostname: "n1"})),
		"update pool":            second(api.UpdatePool(ctx, nc, api.NewUpdatePoolRequest("globex", "workers", testSpec()))),
		"apply":                  second(api.ApplyRevision(ctx, nc, api.ApplyRevisionRequest{Org: "globex", Pool: "workers", Revision: 1})),
		"delete pool":            second(api.DeletePool(ctx, nc, api.DeletePoolRequest{Org: "globex", Name: "workers"})),
		"update":                 second(api.UpdateCluster(ctx, nc, api.UpdateClusterRequest{Org: "globex", Name: "prod", APIEndpoint: ptr("https://evil.example")})),
		"rotate":                 second(api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "globex", Name: "prod", Kubeconfig: api.Secret(testKubeconfig2)})),
		"rotate token":           second(api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "globex", Name: "prod", BootstrapToken: api.Secret(testToken2)})),
		"delete":                 second(api.DeleteCluster(ctx, nc, api.DeleteClusterRequest{Org: "globex", Name: "prod"})),
		"skew":                   second(api.CheckSkew(ctx, nc, api.CheckSkewRequest{Org: "globex", Cluster: "prod", Kubelet: "1.33"})),
		"pool on acme's cluster": second(api.CreatePool(ctx, nc, api.NewCreatePoolRequest("globex", "workers", "prod", testSpec()))),
	} {
		wantErr(t, "globex "+what, err, errs.KindNotFound)
	}

	// globex may use the same names; each keeps its own
	g := h.createCluster("globex", "prod", "1.33.4")
	gp := h.createPool("globex", "workers", "prod", testSpec(), true)
	if gp.Pool.Org != "globex" || gp.Pool.AppliedRevision != 1 {
		t.Fatalf("globex pool: %+v", gp.Pool)
	}
	ac, _ := api.GetCluster(ctx, nc, api.GetClusterRequest{Org: "acme", Name: "prod", MinVersion: gp.Pool.Version})
	if ac.Version != a.Version || ac.KubernetesVersion != "1.34.1" {
		t.Fatalf("acme's cluster changed: %+v", ac)
	}
	app := h.getPool("acme", "workers", gp.Pool.Version)
	if app.Version != ap.Pool.Version || app.AppliedRevision != 0 {
		t.Fatalf("acme's pool changed: %+v", app)
	}
	// Every event is on its own organization's subject.
	for _, e := range h.logEvents(events.Filter{Org: "globex"}) {
		if e.Org != "globex" || e.Sequence <= ap.Pool.Version || e.Sequence < g.Version {
			t.Fatalf("globex event %d on %s", e.Sequence, e.Ref())
		}
	}
	if n := len(h.logEvents(events.Filter{Org: "acme"})); n != 3 { // cluster.created, pool.created, pool.revision_created
		t.Fatalf("acme has %d events, want 3", n)
	}
}

func second[T any](_ T, err error) error { return err }

// TestSecretsNeverInEventsOrLogs: the kubeconfig and the bootstrap token
// (before and after rotation) appear in no stored event (payload, envelope
// or headers) and in no log line, while the service still hands them to
// those who need them.
func TestSecretsNeverInEventsOrLogs(t *testing.T) {
	h := newHarness(t)
	ctx, nc := h.ctx, h.nc
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), true)
	if _, err := api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.RotateBootstrapToken(ctx, nc, api.RotateBootstrapTokenRequest{Org: "acme", Name: "prod", BootstrapToken: api.Secret(testToken2)}); err != nil {
		t.Fatal(err)
	}
	// Refused requests carrying secrets are logged at most by kind.
	_, _ = api.RotateKubeconfig(ctx, nc, api.RotateKubeconfigRequest{Org: "acme", Name: "nope", Kubeconfig: api.Secret(testKubeconfig)})
	if c, err := api.GetClusterCredentials(ctx, nc, api.ClusterCredentialsRequest{Org: "acme", Cluster: "prod"}); err != nil || c.Kubeconfig.Reveal() != testKubeconfig2 {
		t.Fatalf("credentials: %v", err)
	}
	if r, err := api.RenderMachine(ctx, nc, api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"}); err != nil ||
		!strings.Contains(fileContents(t, r.Ignition, "/etc/kubeadm/join.yaml"), testToken2) {
		t.Fatalf("render: %v", err)
	}

	plaintexts := map[string]string{
		"kubeconfig": "kubeconfig-plaintext-7c1e5d", "rotated kubeconfig": "kubeconfig-rotated-9f8e7d",
		"token": testToken, "token secret": "s3cr3tt0k3nv4lu3", "rotated token": testToken2, "rotated token secret": "r0tat3dt0k3nabcd",
	}
	// Every message in the stream, raw: body and headers.
	stream, err := h.env.JS.Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := h.env.Store.Head(context.Background())
	if head < 7 {
		t.Fatalf("only %d events", head)
	}
	for seq := uint64(1); seq <= head; seq++ {
		m, err := stream.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		raw := append(append([]byte(m.Subject), m.Data...), []byte(fmt.Sprint(m.Header))...)
		for what, s := range plaintexts {
			if bytes.Contains(raw, []byte(s)) {
				t.Errorf("event %d contains the %s", seq, what)
			}
		}
	}
	// And the decoded payloads (in case of an escaping that hides bytes).
	for _, e := range h.logEvents(events.Filter{}) {
		var v any
		if err := json.Unmarshal(e.Payload, &v); err != nil {
			t.Fatal(err)
		}
		for what, s := range plaintexts {
			if strings.Contains(fmt.Sprint(v), s) {
				t.Errorf("event %d (%s) payload contains the %s", e.Sequence, e.Type, what)
			}
		}
	}
	logs := h.logs.String()
	if !strings.Contains(logs, `"msg":"started"`) {
		t.Fatalf("no logs captured:\n%s", logs)
	}
	for what, s := range plaintexts {
		if strings.Contains(logs, s) {
			t.Errorf("the logs contain the %s", what)
		}
	}
	// A request printed by a careless caller shows no secret either.
	req := api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig)}
	if s := fmt.Sprintf("%v %+v", req, req); strings.Contains(s, "kubeconfig-plaintext") {
		t.Errorf("a printed request shows the kubeconfig: %s", s)
	}
}

// TestConfig: Run refuses missing or malformed keys naming the flag and
// the variable, a second key opens what the first sealed after rotation
// of the configuration, and readiness waits for the projection.
func TestConfig(t *testing.T) {
	env := eventstest.Start(t, service.NewRegistry())
	run := func(cfg service.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg.Config.Service = service.Name
		return service.Run(ctx, cfg, svc.Options{Conn: env.Conn})
	}
	for _, keys := range []string{"", "k1", "k1:bm90IDMyIGJ5dGVz", "k1:%%%", testKey + "," + testKey} {
		err := run(service.Config{EncryptionKeys: keys})
		if err == nil || !strings.Contains(err.Error(), "--encryption-keys") && !strings.Contains(err.Error(), "ANVIL_REVISIONS_ENCRYPTION_KEYS") {
			t.Errorf("keys %q: %v", keys, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "ANVIL_REVISIONS_ENCRYPTION_KEYS") || len(keys) > 4 && strings.Contains(err.Error(), keys[3:])) {
			t.Errorf("keys %q: the error must name the variable and not echo the key: %v", keys, err)
		}
	}
	if err := run(service.Config{EncryptionKeys: testKey, KubernetesVersions: "1.33.1,banana"}); err == nil || !strings.Contains(err.Error(), "ANVIL_KUBERNETES_VERSIONS") {
		t.Errorf("bad versions: %v", err)
	}
	if err := run(service.Config{EncryptionKeys: testKey, BootURL: "ftp://boot"}); err == nil || !strings.Contains(err.Error(), "--boot-url") {
		t.Errorf("bad boot URL: %v", err)
	}

	// Key rotation: seal with k1, then run with k2 first and k1 still
	// listed; credentials sealed with k1 still open.
	h := newHarness(t)
	h.createCluster("acme", "prod", "1.34.1")
	h.createPool("acme", "workers", "prod", testSpec(), false)
	h.stop()
	h.cfg.EncryptionKeys = testKey2 + "," + testKey
	h.start()
	c, err := api.GetClusterCredentials(h.ctx, h.nc, api.ClusterCredentialsRequest{Org: "acme", Cluster: "prod"})
	if err != nil || c.Kubeconfig.Reveal() != testKubeconfig {
		t.Fatalf("credentials after key rotation: %v", err)
	}
	if _, err := api.RotateKubeconfig(h.ctx, h.nc, api.RotateKubeconfigRequest{Org: "acme", Name: "prod", Kubeconfig: api.Secret(testKubeconfig2)}); err != nil {
		t.Fatal(err)
	}
	kr := h.logEvents(events.Filter{EventTypes: []string{"cluster.kubeconfig_rotated"}})
	if len(kr) != 1 || !strings.Contains(string(kr[0].Payload), `"key_id":"k2"`) {
		t.Fatalf("the new kubeconfig is not sealed with the first key: %d events", len(kr))
	}
	render := api.RenderMachineRequest{Org: "acme", Pool: "workers", Revision: 1, Hostname: "n1"}
	if _, err := api.RenderMachine(h.ctx, h.nc, render); err != nil {
		t.Fatalf("render with both keys: %v", err)
	}
	// Without the old key, what it sealed (the bootstrap token) no longer
	// opens, and the error says which key is missing.
	h.stop()
	h.cfg.EncryptionKeys = testKey2
	h.start()
	if _, err := api.RenderMachine(h.ctx, h.nc, render); !errs.Is(err, errs.KindInternal) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("render without the old key: %v", err)
	}

	// Readiness: /readyz answers 200 only once the projection is live.
	h.stop()
	addr := freeAddr(t)
	h.cfg.AdminAddr = addr
	h.start()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d: %s", resp.StatusCode, body.String())
	}
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(metrics.String(), "anvil_render_cache_hits_total") || !strings.Contains(metrics.String(), `anvil_projection_checkpoint{projection="revisions"}`) {
		t.Fatalf("/metrics lacks the render cache or projection metrics")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
