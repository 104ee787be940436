package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	boot "github.com/anvil-fleet/anvil/services/boot/service"
	gateway "github.com/anvil-fleet/anvil/services/gateway/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app"
	registry "github.com/anvil-fleet/anvil/services/registry/service"
	revisions "github.com/anvil-fleet/anvil/services/revisions/service"
	rollout "github.com/anvil-fleet/anvil/services/rollout/service"
)

const adminToken = "anvil_admin_test_bootstrap_token_0123456789"

type stack struct {
	t      testing.TB
	base   string
	boot   string // the boot service's URL
	reg    *registry.Service
	nc     *nats.Conn // the test's connection to the embedded server
	env    *eventstest.Env
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // routes whose responses were validated
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// stackOption changes what startStack runs.
type stackOption int

const (
	// withRollout also runs the real rollout service.
	withRollout stackOption = iota + 1
	// forKube runs the real rollout service with quick timings and a
	// Kubernetes catalog that the harness's v1.37.1 API server allows
	// (1.36.4, 1.37.1), and quick iPXE retries, for a simulated fleet.
	forKube
	// ownConns gives the registry and the gateway each its own NATS
	// connection, as in a deployment (separate processes), rather than
	// the one they otherwise share with the test: a request and its reply
	// then cross the server between two clients.
	ownConns
	// shippedCaches runs the gateway with its caches' shipped settings
	// (a verified token for 5s, a read answer for at most 2s) instead of
	// the hour that otherwise leaves their invalidation alone to refresh
	// them: for the benchmarks.
	shippedCaches
)

func startStack(t testing.TB, opts ...stackOption) *stack {
	t.Helper()
	env := eventstest.Start(t, app.Registry())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*nats.Conn // ownConns: closed once the services stopped
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	})
	kube := slices.Contains(opts, forKube)
	versions := strings.Join(revisions.DefaultKubernetesVersions, ",")
	if kube {
		versions = "1.36.4,1.37.1"
	}
	// The boot service serves the simulator's assets for the catalog: the
	// revisions service checks a revision's files with it before saving.
	assets, err := simassets.Dir(t.TempDir(), versions)
	if err != nil {
		t.Fatal(err)
	}
	bootCfg := boot.Config{Config: svc.Config{Service: "boot"}, Listen: freeAddr(t), AssetsDir: assets}
	rolloutCfg := rollout.Config{Config: svc.Config{Service: "rollout"}}
	if kube {
		bootCfg.RetryInitial, bootCfg.RetryMax = 200*time.Millisecond, time.Second
		rolloutCfg.LeaseTTL, rolloutCfg.Poll, rolloutCfg.Replan = 3*time.Second, 500*time.Millisecond, 5*time.Second
	}
	conn := func() *nats.Conn {
		if !slices.Contains(opts, ownConns) {
			return env.Conn
		}
		nc, err := env.Server.Connect()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		return nc
	}
	ready := make(chan *registry.Service, 1)
	wg.Add(2)
	regConn, gatewayConn := conn(), conn()
	go func() {
		defer wg.Done()
		_ = registry.Start(ctx, registry.Config{Config: svc.Config{Service: "registry"}}, svc.Options{Conn: regConn}, registry.Hooks{Ready: ready})
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := revisions.Run(ctx, revisions.Config{Config: svc.Config{Service: "revisions"}, EncryptionKeys: "k1:" + base64.StdEncoding.EncodeToString(make([]byte, 32)),
			KubernetesVersions: versions, BootURL: "http://" + bootCfg.Listen}, svc.Options{Conn: env.Conn})
		if err != nil && ctx.Err() == nil {
			t.Errorf("revisions: %v", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := boot.Run(ctx, bootCfg, svc.Options{Conn: env.Conn})
		if err != nil && ctx.Err() == nil {
			t.Errorf("boot: %v", err)
		}
	}()
	if !slices.Contains(opts, withRollout) && !kube {
		// Without the rollout service the gateway would never be ready
		// (it is ready only while the services it calls are): a stand-in
		// says rollout is, so that readiness reflects the services that
		// run. Tests that exercise rollouts run the real service or
		// newFakeRollout.
		sub, err := env.Conn.Subscribe(svc.ReadySubject("rollout"), func(m *nats.Msg) {
			data, _ := json.Marshal(svc.Readiness{Ready: true})
			_ = m.Respond(data)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if slices.Contains(opts, withRollout) || kube {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rollout.Run(ctx, rolloutCfg, svc.Options{Conn: env.Conn})
			if err != nil && ctx.Err() == nil {
				t.Errorf("rollout: %v", err)
			}
		}()
	}
	addr := freeAddr(t)
	gatewayCfg := gateway.Config{Config: svc.Config{Service: "gateway"}, Listen: addr, AdminTokenHash: hash(adminToken), BodyLimit: 64 << 10,
		TokenCacheTTL:   time.Hour, // so that only the invalidation can make a revocation take effect
		ReadCacheMaxAge: time.Hour, // and only the registry's change notices can refresh a machine read
	}
	if slices.Contains(opts, shippedCaches) {
		gatewayCfg.TokenCacheTTL, gatewayCfg.ReadCacheMaxAge = 0, 0 // the defaults
	}
	go func() {
		defer wg.Done()
		err := gateway.Run(ctx, gatewayCfg, svc.Options{Conn: gatewayConn})
		if err != nil && ctx.Err() == nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	s := &stack{t: t, base: "http://" + addr, boot: "http://" + bootCfg.Listen, nc: env.Conn, env: env, seen: map[string]bool{}}
	select {
	case s.reg = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("registry did not start")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(s.base + "/readyz")
		if err == nil && res.StatusCode == 200 {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var doc []byte
	s.do("GET", "/openapi.json", "", nil, nil, &doc)
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := spec.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not valid: %v", err)
	}
	spec.Servers = openapi3.Servers{{URL: s.base}}
	if s.router, err = gorillamux.NewRouter(spec); err != nil {
		t.Fatal(err)
	}
	return s
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problem() (p struct {
	Status int
	Detail string
	Errors []struct{ Field, Reason string }
}) {
	_ = json.Unmarshal(r.body, &p)
	return p
}

// do sends a request; out, if not nil, receives the decoded JSON body (or
// raw bytes for *[]byte). Every answer to an API route is validated against
// the OpenAPI document.
func (s *stack) do(method, path, tok string, body any, hdr map[string]string, out any) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, s.base+path, rd)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 500 && res.StatusCode != 503 {
		s.t.Errorf("%s %s: %d %s", method, path, res.StatusCode, data)
	}
	if strings.HasPrefix(path, "/api/") {
		s.validate(req, res, data)
	}
	if out != nil {
		if raw, ok := out.(*[]byte); ok {
			*raw = data
		} else if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: %d %s: %v", method, path, res.StatusCode, data, err)
		}
	}
	return reply{status: res.StatusCode, header: res.Header, body: data}
}

func (s *stack) validate(req *http.Request, res *http.Response, data []byte) {
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		if res.StatusCode != 404 {
			s.t.Errorf("%s %s is not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Body: io.NopCloser(bytes.NewReader(data)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		s.t.Errorf("%s %s -> %d does not match the OpenAPI document: %v\nbody: %s", req.Method, req.URL.Path, res.StatusCode, err, data)
	}
	s.mu.Lock()
	s.seen[req.Method+" "+route.Path] = true
	s.mu.Unlock()
}

// tenants makes orgs acme and globex with tokens of every role.
type tenants struct {
	viewer, operator, admin, otherAdmin string
	enroll                              string
}

func (s *stack) tenants() tenants {
	s.t.Helper()
	var tn tenants
	for _, o := range []string{"acme", "globex"} {
		if r := s.do("POST", "/api/v1/orgs", adminToken, map[string]any{"id": o, "display_name": strings.ToUpper(o)}, nil, nil); r.status != 201 {
			s.t.Fatalf("create org %s: %d %s", o, r.status, r.body)
		}
	}
	s.waitOrgs()
	issue := func(org, role string) string {
		var out regapi.TokenIssued
		r := s.do("POST", "/api/v1/orgs/"+org+"/tokens", adminToken, map[string]any{"name": role + "-bot", "role": role}, nil, &out)
		if r.status != 201 {
			s.t.Fatalf("issue %s token: %d %s", role, r.status, r.body)
		}
		return out.Token
	}
	tn.viewer, tn.operator, tn.admin = issue("acme", "viewer"), issue("acme", "operator"), issue("acme", "admin")
	tn.otherAdmin = issue("globex", "admin")
	var en regapi.TokenIssued
	s.do("POST", "/api/v1/orgs/acme/enrollment-tokens", adminToken, map[string]any{"name": "rack"}, nil, &en)
	tn.enroll = en.Token
	s.waitOrgs()
	return tn
}

// waitOrgs waits until the registry's org projection has applied the
// newest organization event in the log.
func (s *stack) waitOrgs() { s.waitProjection(s.reg.Orgs, "org") }

// waitMachines waits until the registry's machine projection has applied
// the newest machine event in the log.
func (s *stack) waitMachines() { s.waitProjection(s.reg.Machines, "machine") }

// waitProjection waits until r has applied the newest event of
// aggregateType in the log (r's filter selects exactly those).
func (s *stack) waitProjection(r *projection.Runner, aggregateType string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.env.JS.Stream(ctx, events.StreamName)
	if err != nil {
		s.t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, events.FilterSubject("", aggregateType, ""))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return // no such event yet: nothing to wait for
	}
	if err != nil {
		s.t.Fatal(err)
	}
	if err := r.WaitFor(ctx, last.Sequence); err != nil {
		s.t.Fatalf("the registry's %s projection did not apply event %d: %v", aggregateType, last.Sequence, err)
	}
}

func uuidN(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i) }
