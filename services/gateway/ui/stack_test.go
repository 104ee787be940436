package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	"github.com/anvil-fleet/anvil/services/gateway/ui"
)

const adminToken = "anvil_admin_console_test_0123456789abcdef"

// kubernetesVersions is the stack's catalog: two versions the harness's
// v1.37.1 API server allows kubelets of.
const kubernetesVersions = "1.36.4,1.37.1"

// stack is the whole control plane (devstack: an embedded JetStream and
// the five services, the gateway with the console mounted) for a test.
type stack struct {
	t        testing.TB
	base     string // the gateway (API and console)
	boot     string // the boot service, as machines reach it
	st       *devstack.Stack
	logs     *eventstest.SyncBuffer
	adminTok string
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startStack runs the dev stack with the harness's Kubernetes versions in
// the catalog and quick rollout and boot timings. The console learns the
// boot service's URL from its environment variable, as a deployment does.
func startStack(t *testing.T) *stack {
	t.Helper()
	addr, bootAddr := freeAddr(t), freeAddr(t)
	t.Setenv(ui.EnvBootURL, "http://"+bootAddr)
	logs := &eventstest.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if os.Getenv("ANVIL_TEST_LOGS") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	// the simulator's stand-ins for the agent binary and the Kubernetes
	// sysexts, which a pool revision needs
	assets, err := simassets.Dir(t.TempDir(), kubernetesVersions)
	if err != nil {
		t.Fatal(err)
	}
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: t.TempDir(), GatewayAddr: addr, BootAddr: bootAddr,
		AdminToken: adminToken, Logger: logger, AssetsDir: assets,
		// two versions the harness's v1.37.1 API server allows kubelets of
		KubernetesVersions: kubernetesVersions,
		RolloutLeaseTTL:    3 * time.Second, RolloutPoll: 500 * time.Millisecond, RolloutReplan: 5 * time.Second,
		BootRetryInitial: 200 * time.Millisecond, BootRetryMax: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, base: "http://" + addr, boot: "http://" + bootAddr, st: st, logs: logs, adminTok: adminToken}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' logs (last 20000 bytes):\n%s", logs.Tail(20000))
		}
		if err := st.Stop(); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	s.eventually("the gateway is ready", time.Minute, func() (bool, string) {
		res, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == 200, res.Status
	})
	return s
}

func (s *stack) eventually(what string, d time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	eventstest.Eventually(s.t, what, d, 100*time.Millisecond, cond)
}

// api calls the HTTP API; out, if not nil, receives the decoded answer.
func (s *stack) api(method, path, token string, body any, out any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return res.StatusCode, data
}

// mustAPI is api that wants a status.
func (s *stack) mustAPI(want int, method, path, token string, body any, out any) {
	s.t.Helper()
	if st, data := s.api(method, path, token, body, out); st != want {
		s.t.Fatalf("%s %s: %d, want %d: %s", method, path, st, want, data)
	}
}

// org makes an organization and returns tokens of the given roles.
func (s *stack) org(id, display string, roles ...string) map[string]string {
	s.t.Helper()
	// Ready does not promise the registry's command subscriptions reached
	// the server yet: "no service answers" (503, nothing created) is
	// retried, any other refusal fails
	s.eventually("organization "+id+" is created", 10*time.Second, func() (bool, string) {
		st, data := s.api("POST", "/api/v1/orgs", s.adminTok, map[string]string{"id": id, "display_name": display}, nil)
		if st != 201 && !(st == http.StatusServiceUnavailable && strings.Contains(string(data), "no service answers")) {
			s.t.Fatalf("POST /api/v1/orgs: %d, want 201: %s", st, data)
		}
		return st == 201, string(data)
	})
	toks := map[string]string{}
	for _, role := range roles {
		var out struct{ Token string }
		// the registry's projection of the new org may lag a moment
		s.eventually("a "+role+" token of "+id, 10*time.Second, func() (bool, string) {
			st, data := s.api("POST", "/api/v1/orgs/"+id+"/tokens", s.adminTok, map[string]string{"name": role + "-token", "role": role}, &out)
			return st == 201, string(data)
		})
		toks[role] = out.Token
	}
	// tokens verify once the registry applied them
	for role, tok := range toks {
		s.eventually("the "+role+" token works", 10*time.Second, func() (bool, string) {
			st, data := s.api("GET", "/api/v1/orgs/"+id, tok, nil, nil)
			return st == 200, string(data)
		})
	}
	return toks
}

// client is a console user without a browser: a cookie jar and no
// redirects followed, so that tests see every answer.
type client struct {
	t    testing.TB
	base string
	http *http.Client
}

func (s *stack) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: s.t, base: s.base, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (c *client) get(path string) page {
	c.t.Helper()
	return c.do("GET", path, nil, nil)
}

// post sends a form; Origin is the console's own unless hdr says otherwise.
func (c *client) post(path string, form url.Values, hdr map[string]string) page {
	c.t.Helper()
	h := map[string]string{"Origin": c.base, "Content-Type": "application/x-www-form-urlencoded"}
	for k, v := range hdr {
		h[k] = v
	}
	return c.do("POST", path, strings.NewReader(form.Encode()), h)
}

func (c *client) do(method, path string, body io.Reader, hdr map[string]string) page {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, body)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{status: res.StatusCode, header: res.Header, body: string(b)}
}

// field reads the value of the first hidden input named name.
func (p page) field(name string) string {
	marker := `name="` + name + `" value="`
	i := strings.Index(p.body, marker)
	if i < 0 {
		return ""
	}
	rest := p.body[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// signIn signs in with token and wants to land on the start page.
func (c *client) signIn(token string) page {
	c.t.Helper()
	form := c.get("/ui/sign-in")
	p := c.post("/ui/sign-in", url.Values{"csrf": {form.field("csrf")}, "token": {token}}, nil)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
		c.t.Fatalf("sign-in: %d %s\n%s", p.status, p.header.Get("Location"), p.body)
	}
	return p
}

func (p page) mustContain(t testing.TB, what ...string) {
	t.Helper()
	for _, w := range what {
		if !strings.Contains(p.body, w) {
			t.Fatalf("the page (status %d) lacks %q:\n%s", p.status, w, mainOf(p.body))
		}
	}
}

// mainOf is the page's <main>, for failure messages.
func mainOf(body string) string {
	if i := strings.Index(body, "<main"); i >= 0 {
		body = body[i:]
	}
	if j := strings.Index(body, "</main>"); j >= 0 {
		body = body[:j]
	}
	if len(body) > 6000 {
		body = body[:6000] + "…"
	}
	return body
}

// showsHost reports whether a page shows a machine with this hostname (in
// a list or as a machine page's heading).
func showsHost(body, host string) bool {
	return strings.Contains(body, ">"+host+"</a>") || strings.Contains(body, "<h1>"+host+" <code")
}
