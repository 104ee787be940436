package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/ignition/v2/config/v3_4"
	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	regservice "github.com/anvil-fleet/anvil/services/registry/service"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	revservice "github.com/anvil-fleet/anvil/services/revisions/service"
)

// Fixtures of the revisions service.
var (
	encryptionKey = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	signingKey    = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
	k8sVersions   = "1.32.7,1.33.4"
	bootstrapTok  = "abcdef.0123456789abcdef"
	caHash        = "sha256:" + strings.Repeat("ab", 32)
	testActor     = "token:t1 (test)"
	kubeconfig    = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.example:6443'}\nusers:\n- name: drain\n  user: {token: kubeconfig-secret-1}\ncontexts:\n- name: c\n  context: {cluster: c, user: drain}\ncurrent-context: c\n"
)

// clock is the boot service's clock, which a test can move forward.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// stack is an embedded JetStream with the real registry, revisions and boot
// services on it, each with its own connection, talking only over NATS;
// the boot service listens on 127.0.0.1.
type stack struct {
	t     testing.TB
	env   *eventstest.Env
	nc    *nats.Conn // the test's own client connection
	reg   regapi.Client
	regs  *regservice.Service
	boot  *service.Service
	url   string // http://127.0.0.1:PORT
	ctx   context.Context
	clock *clock
	logs  *eventstest.SyncBuffer // every service's logs
	// assets is the boot service's assets directory, with the simulator's
	// assets for k8sVersions (simassets) unless a test's options changed it.
	assets string

	stopRegistry, stopRevisions, stopBoot func()
}

type stackOptions struct {
	boot       func(*service.Config)
	registry   func(*regservice.Config)
	hooks      service.Hooks
	logLevel   slog.Level
	bootListen string
}

func newStack(t testing.TB, opts ...func(*stackOptions)) *stack {
	t.Helper()
	o := stackOptions{logLevel: slog.LevelDebug, bootListen: "127.0.0.1:0"}
	for _, f := range opts {
		f(&o)
	}
	env := eventstest.Start(t, service.NewRegistry())
	s := &stack{t: t, env: env, ctx: events.WithActor(context.Background(), testActor), clock: &clock{}, logs: &eventstest.SyncBuffer{}}
	s.nc = s.conn()
	s.reg = regapi.Client{NC: s.nc}
	logger := func(name string) *slog.Logger {
		return slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: o.logLevel})).With("svc", name)
	}

	// registry
	ready := make(chan *regservice.Service, 1)
	s.stopRegistry = s.run("registry", func(ctx context.Context) error {
		cfg := regservice.Config{Config: svc.Config{Service: "registry", StreamReplicas: 1}}
		if o.registry != nil {
			o.registry(&cfg)
		}
		return regservice.Start(ctx, cfg, svc.Options{Conn: s.conn(), Logger: logger("registry")}, regservice.Hooks{Ready: ready})
	}, func() { s.regs = <-ready })

	// boot, first: the revisions service renders its URL into Ignition
	bready := make(chan *service.Service, 1)
	assets, err := simassets.Dir(t.TempDir(), k8sVersions)
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.Config{Config: svc.Config{Service: service.Name}, Listen: o.bootListen, SigningKeys: signingKey,
		RetryInitial: time.Second, RetryMax: 4 * time.Second, AssetBaseURL: "http://mirror.test/flatcar", AssetsDir: assets}
	if o.boot != nil {
		o.boot(&cfg)
	}
	s.assets = cfg.AssetsDir
	hooks := o.hooks
	hooks.Ready = bready
	if hooks.Now == nil {
		hooks.Now = s.clock.now
	}
	s.stopBoot = s.run("boot", func(ctx context.Context) error {
		return service.Start(ctx, cfg, svc.Options{Conn: s.conn(), Logger: logger("boot")}, hooks)
	}, func() { s.boot = <-bready })
	s.url = "http://" + s.boot.Addr

	// revisions
	s.stopRevisions = s.startRevisions(logger("revisions"))
	return s
}

func (s *stack) startRevisions(log *slog.Logger) func() {
	cfg := revservice.Config{
		Config:         svc.Config{Service: revservice.Name, StreamReplicas: 1},
		EncryptionKeys: encryptionKey, KubernetesVersions: k8sVersions, BootURL: s.url,
	}
	return s.run("revisions", func(ctx context.Context) error {
		return revservice.Run(ctx, cfg, svc.Options{Conn: s.conn(), Logger: log})
	}, func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := revapi.ListCatalog(s.ctx, s.nc, revapi.ListCatalogRequest{Org: "acme"}); err == nil {
				return
			} else if time.Now().After(deadline) {
				s.t.Fatalf("revisions did not answer: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// run starts a service in the background, waits with ready, and returns
// its stop function (also run at cleanup).
func (s *stack) run(name string, fn func(context.Context) error, ready func()) func() {
	s.t.Helper()
	return eventstest.RunService(s.t, name, fn, ready,
		eventstest.RunOptions{StartTimeout: 60 * time.Second, StopTimeout: 30 * time.Second, Logs: s.logs})
}

func (s *stack) conn() *nats.Conn {
	s.t.Helper()
	return s.env.Connect(s.t)
}

// org creates an organization and returns an enrollment token.
func (s *stack) org(id string) string {
	s.t.Helper()
	o, err := s.reg.CreateOrg(s.ctx, regapi.OrgCreate{ID: id, DisplayName: "Org " + id})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.regs.Orgs.WaitFor(s.ctx, o.Version); err != nil {
		s.t.Fatal(err)
	}
	return s.enrollToken(id, time.Time{})
}

func (s *stack) enrollToken(org string, expires time.Time) string {
	s.t.Helper()
	tok, err := s.reg.IssueToken(s.ctx, regapi.TokenIssue{Org: org, Kind: regapi.KindEnrollment, Name: "rack-1", ExpiresAt: expires})
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitOrg(org)
	return tok.Token
}

func (s *stack) waitOrg(id string) {
	s.t.Helper()
	envs, err := s.env.Store.Load(s.ctx, events.AggregateRef{Org: id, Type: "org", ID: id})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.regs.Orgs.WaitFor(s.ctx, events.Version(envs)); err != nil {
		s.t.Fatal(err)
	}
}

// pool creates a cluster and a pool (revision 1) in org.
func (s *stack) pool(org, name string) {
	s.t.Helper()
	if _, err := revapi.CreateCluster(s.ctx, s.nc, revapi.CreateClusterRequest{
		Org: org, Name: name + "-cluster", APIEndpoint: "https://api." + name + ".example:6443", KubernetesVersion: "1.33.4",
		Kubeconfig: revapi.Secret(kubeconfig), BootstrapToken: revapi.Secret(bootstrapTok), CACertHash: caHash,
	}); err != nil {
		s.t.Fatal(err)
	}
	req := revapi.NewCreatePoolRequest(org, name, name+"-cluster", poolSpec("4230.2.3"))
	if _, err := revapi.CreatePool(s.ctx, s.nc, req); err != nil {
		s.t.Fatal(err)
	}
}

func poolSpec(flatcar string) revapi.PoolSpec {
	return revapi.PoolSpec{
		DisplayName: "Workers",
		Kubernetes:  revapi.Kubernetes{Minor: "1.33"},
		Flatcar:     revapi.Flatcar{Channel: "stable", Version: flatcar},
		NodeLabels:  map[string]string{"anvil.dev/rack": "r12"},
	}
}

// newRevision saves a changed pool spec: the pool's next revision.
func (s *stack) newRevision(org, pool, flatcar string) int {
	s.t.Helper()
	c, err := revapi.UpdatePool(s.ctx, s.nc, revapi.NewUpdatePoolRequest(org, pool, poolSpec(flatcar)))
	if err != nil || c.RevisionCreated == 0 {
		s.t.Fatalf("update pool: %+v %v", c, err)
	}
	return c.RevisionCreated
}

// renderOptions are the options the revisions service renders a revision
// of the given Kubernetes version with: the boot service's URL and its
// files as it resolves them over NATS.
func (s *stack) renderOptions(version string) render.Options {
	s.t.Helper()
	agent, _ := bootapi.AgentAsset("amd64")
	sysext, _ := bootapi.SysextAsset(version, "x86-64")
	r, err := bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{Names: []string{agent, sysext}})
	if err != nil || len(r.Assets) != 2 || r.Assets[0].Status != bootapi.AssetReady || r.Assets[1].Status != bootapi.AssetReady {
		s.t.Fatalf("resolving %s and %s: %+v %v", agent, sysext, r, err)
	}
	return render.Options{BaseURL: s.url, Arch: "x86-64",
		AgentURL: s.url + r.Assets[0].Path, AgentHash: r.Assets[0].Hash, SysextURL: s.url + r.Assets[1].Path, SysextHash: r.Assets[1].Hash}
}

// assign puts a machine into a pool with a target revision.
func (s *stack) assign(org, uuid, pool string, rev uint64) {
	s.t.Helper()
	for _, c := range []regapi.MachineCommand{regapi.AssignToPool{Pool: pool}, regapi.SetTargetRevision{Revision: rev}} {
		r, err := s.reg.Machine(s.ctx, org, uuid, c, 0)
		if err != nil {
			s.t.Fatalf("%s: %v", c.CommandType(), err)
		}
		s.waitMachine(r.Version)
	}
}

func (s *stack) waitMachine(version uint64) {
	s.t.Helper()
	if err := s.regs.Machines.WaitFor(s.ctx, version); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) machine(org, uuid string) (regapi.Machine, error) {
	r, err := s.reg.GetMachine(s.ctx, regapi.MachineGet{Org: org, UUID: uuid})
	return r.Machine, err
}

// eventually polls cond until it holds or the deadline passes.
func (s *stack) eventually(what string, d time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	eventstest.Eventually(s.t, what, d, 25*time.Millisecond, cond)
}

// ---- HTTP as firmware and Ignition do it ----

type response struct {
	status int
	header http.Header
	body   string
}

func (s *stack) get(rawURL string) response {
	s.t.Helper()
	return do(s.t, http.DefaultClient, http.MethodGet, rawURL, "", nil)
}

func do(t testing.TB, c *http.Client, method, rawURL, auth string, body io.Reader) response {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// ipxeGet is what iPXE does with a chain URL holding ${uuid} and
// ${net0/mac:hexhyp}: expand them and fetch. It checks the answer is a
// valid script served with 200.
func (s *stack) ipxeGet(rawURL, uuid, mac string) string {
	s.t.Helper()
	rawURL = strings.ReplaceAll(strings.ReplaceAll(rawURL, ipxe.UUIDTemplate, uuid), ipxe.MACTemplate, mac)
	r := s.get(rawURL)
	checkScript(s.t, r)
	return r.body
}

func checkScript(t testing.TB, r response) {
	t.Helper()
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("iPXE answer %d %s:\n%s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if err := ipxe.Lint(r.body); err != nil {
		t.Fatalf("invalid script: %v\n%s", err, r.body)
	}
}

var (
	chainRe    = regexp.MustCompile(`(?m)^chain --replace --autofree (\S+) \|\| goto unreachable$`)
	kernelRe   = regexp.MustCompile(`(?m)^kernel (\S+) (.*) \|\| goto failed$`)
	initrdRe   = regexp.MustCompile(`(?m)^initrd (\S+) \|\| goto failed$`)
	ignitionRe = regexp.MustCompile(`ignition\.config\.url=(\S+)`)
)

// chainTarget returns the URL a script chains to.
func chainTarget(t testing.TB, script string) string {
	t.Helper()
	m := chainRe.FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no chain in\n%s", script)
	}
	return m[1]
}

// bootScript is a parsed boot script.
type bootScript struct {
	kernel, initrd, ignitionURL string
	args                        []string
}

func parseBoot(t testing.TB, script string) bootScript {
	t.Helper()
	k, i := kernelRe.FindStringSubmatch(script), initrdRe.FindStringSubmatch(script)
	if k == nil || i == nil {
		t.Fatalf("not a boot script:\n%s", script)
	}
	b := bootScript{kernel: k[1], initrd: i[1], args: strings.Fields(k[2])}
	if m := ignitionRe.FindStringSubmatch(k[2]); m != nil {
		b.ignitionURL = m[1]
	}
	return b
}

// served is a parsed Ignition config.
type served struct {
	raw        string
	files      map[string]string // path -> decoded contents
	credential string
}

func (s *stack) ignition(rawURL string) served {
	s.t.Helper()
	r := s.get(rawURL)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/vnd.coreos.ignition+json" {
		s.t.Fatalf("ignition: %d %s\n%s", r.status, r.header.Get("Content-Type"), r.body)
	}
	return parseIgnition(s.t, r.body)
}

func parseIgnition(t testing.TB, body string) served {
	t.Helper()
	cfg, report, err := v3_4.Parse([]byte(body))
	if err != nil || len(report.Entries) > 0 {
		t.Fatalf("not valid Ignition 3.4: %v %s", err, report.String())
	}
	if strings.Contains(body, revapi.AgentCredentialPlaceholder) {
		t.Fatal("the credential placeholder is still in the served config")
	}
	out := served{raw: body, files: map[string]string{}}
	for _, f := range cfg.Storage.Files {
		if f.Contents.Source == nil || !strings.HasPrefix(*f.Contents.Source, "data:") {
			continue
		}
		meta, data, _ := strings.Cut(*f.Contents.Source, ",")
		var dec []byte
		var err error
		if strings.HasSuffix(meta, ";base64") {
			dec, err = base64.StdEncoding.DecodeString(data)
		} else {
			var s string
			s, err = url.PathUnescape(data)
			dec = []byte(s)
		}
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		out.files[f.Path] = string(dec)
	}
	env := out.files["/etc/anvil/agent.env"]
	for _, l := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(l, "ANVIL_AGENT_CREDENTIAL="); ok {
			out.credential = v
		}
	}
	if out.credential == "" {
		t.Fatalf("no credential in agent.env:\n%s", env)
	}
	return out
}

// fakeRoot builds a machine's root from the agent's inventory fixture (a
// 16-core server), its SMBIOS UUID and the files Ignition wrote.
func fakeRoot(t testing.TB, uuid string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../../../agent/inventory/testdata/host")); err != nil {
		t.Fatal(err)
	}
	files["/sys/class/dmi/id/product_uuid"] = strings.ToUpper(uuid) + "\n"
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func uuidN(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i+1) }

func macN(i int) string {
	n := i + 1
	return fmt.Sprintf("52-54-%02x-%02x-%02x-%02x", (n>>24)&0xff, (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
