package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/services/gateway/ui"
)

// The console's access rules, without a browser: sessions, CSRF, roles,
// organization isolation and escaping, against the whole stack.
func TestConsoleHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	s := startStack(t)
	acme := s.org("acme", `ACME <script>alert("org")</script>`, "admin", "operator", "viewer")
	globex := s.org("globex", "Globex", "admin")
	const mine, theirs = "4c4c4544-0035-4b10-8056-00000000a001", "4c4c4544-0035-4b10-8056-00000000b001"
	s.mustAPI(201, "POST", "/api/v1/orgs/acme/machines", acme["operator"], map[string]any{"uuid": mine, "hostname": "w1", "labels": map[string]string{"rack": "r1"}}, nil)
	s.mustAPI(201, "POST", "/api/v1/orgs/globex/machines", globex["admin"], map[string]any{"uuid": theirs, "hostname": "g1"}, nil)
	// a cluster (unreachable: nothing here drains) and a pool, for the forms
	s.mustAPI(201, "POST", "/api/v1/orgs/acme/clusters", acme["admin"], map[string]any{"name": "prod", "api_endpoint": "https://127.0.0.1:1",
		"kubernetes_version": "1.37.1", "ca_cert_hash": "sha256:" + strings.Repeat("ab", 32), "bootstrap_token": "abcdef.0123456789abcdef",
		"kubeconfig": "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: drain\n  user: {token: t0k3n}\ncontexts:\n- name: prod\n  context: {cluster: prod, user: drain}\ncurrent-context: prod\n"}, nil)
	s.eventually("pool workers is created", 10*time.Second, func() (bool, string) {
		st, data := s.api("POST", "/api/v1/orgs/acme/pools", acme["admin"], map[string]any{"name": "workers", "cluster": "prod",
			"display_name": `Workers <img src=x onerror=alert(1)>`, "kubernetes": map[string]any{"minor": "1.36"},
			"flatcar": map[string]any{"channel": "stable", "version": "4230.2.3"}}, nil)
		return st == 201, string(data)
	})
	s.eventually("both machines are readable", 10*time.Second, func() (bool, string) {
		a, _ := s.api("GET", "/api/v1/orgs/acme/machines/"+mine, acme["viewer"], nil, nil)
		b, _ := s.api("GET", "/api/v1/orgs/globex/machines/"+theirs, globex["admin"], nil, nil)
		return a == 200 && b == 200, ""
	})

	t.Run("unauthenticated", func(t *testing.T) {
		c := s.client()
		if p := c.get("/"); p.status != http.StatusFound || p.header.Get("Location") != "/ui/" {
			t.Fatalf("/: %d %s", p.status, p.header.Get("Location"))
		}
		p := c.get("/ui/orgs/acme/machines")
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/sign-in?next=%2Fui%2Forgs%2Facme%2Fmachines" {
			t.Fatalf("a page without a session: %d %s", p.status, p.header.Get("Location"))
		}
		// the API is untouched by the mount
		if p := c.get("/api/v1/orgs"); p.status != http.StatusUnauthorized {
			t.Fatalf("the API without a token: %d", p.status)
		}
		p = c.get("/ui/sign-in")
		for _, h := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options"} {
			if p.header.Get(h) == "" {
				t.Errorf("the sign-in page lacks %s", h)
			}
		}
		if !strings.Contains(p.header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("CSP: %s", p.header.Get("Content-Security-Policy"))
		}
		// a token the API refuses: a message for a person
		form := c.get("/ui/sign-in")
		p = c.post("/ui/sign-in", url.Values{"csrf": {form.field("csrf")}, "token": {"anvil_api_nope"}}, nil)
		if p.status != http.StatusUnauthorized {
			t.Fatalf("a bad token: %d", p.status)
		}
		p.mustContain(t, "does not accept this token")
	})

	t.Run("session cookie and store", func(t *testing.T) {
		c := s.client()
		p := c.signIn(acme["viewer"])
		var sid string
		for _, ck := range (&http.Response{Header: p.header}).Cookies() {
			if ck.Name == "anvil_session" {
				sid = ck.Value
				if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/ui" {
					t.Fatalf("the session cookie over plain HTTP: %+v", ck)
				}
			}
		}
		if sid == "" {
			t.Fatal("no session cookie")
		}
		// behind a TLS-terminating proxy the cookie is Secure
		c2 := s.client()
		form := c2.get("/ui/sign-in")
		p = c2.post("/ui/sign-in", url.Values{"csrf": {form.field("csrf")}, "token": {acme["viewer"]}}, map[string]string{"X-Forwarded-Proto": "https"})
		if !strings.Contains(p.header.Get("Set-Cookie"), "Secure") {
			t.Fatalf("behind https: %v", p.header["Set-Cookie"])
		}

		// the bucket holds neither the token nor the session id: the key
		// is the id's SHA-256, the token is sealed
		nc, err := s.st.NATS.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		kv, err := js.KeyValue(context.Background(), ui.SessionBucket)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(sid))
		e, err := kv.Get(context.Background(), hex.EncodeToString(sum[:]))
		if err != nil {
			t.Fatalf("the session is not filed under its id's hash: %v", err)
		}
		if v := string(e.Value()); strings.Contains(v, acme["viewer"]) || strings.Contains(v, sid) {
			t.Fatalf("the bucket holds the token or the session id in clear: %s", v)
		}
		if c.get("/ui/orgs/acme/machines").status != 200 {
			t.Fatal("the session does not open pages")
		}

		// sign-out ends it on the server: the old cookie opens nothing
		out := c.get("/ui/orgs/acme/machines")
		p = c.post("/ui/sign-out", url.Values{"csrf": {out.field("csrf")}}, nil)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/sign-in" {
			t.Fatalf("sign-out: %d %s", p.status, p.header.Get("Location"))
		}
		if _, err := kv.Get(context.Background(), hex.EncodeToString(sum[:])); err == nil {
			t.Fatal("the session is still in the bucket after sign-out")
		}
		replay := s.client()
		req, _ := http.NewRequest("GET", s.base+"/ui/orgs/acme/machines", nil)
		req.AddCookie(&http.Cookie{Name: "anvil_session", Value: sid})
		res, err := replay.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/sign-in") {
			t.Fatalf("the signed-out cookie replayed: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
	})

	t.Run("CSRF", func(t *testing.T) {
		c := s.client()
		c.signIn(acme["operator"])
		m := "/ui/orgs/acme/machines/" + mine
		pg := c.get(m)
		csrf, version := pg.field("csrf"), ""
		confirm := c.get(m + "/confirm?action=maintenance-on")
		version = confirm.field("version")
		for name, tc := range map[string]struct {
			form url.Values
			hdr  map[string]string
		}{
			"no token":      {url.Values{"version": {version}}, nil},
			"a wrong token": {url.Values{"version": {version}, "csrf": {csrf + "x"}}, nil},
			"another site":  {url.Values{"version": {version}, "csrf": {csrf}}, map[string]string{"Origin": "https://evil.example"}},
		} {
			p := c.post(m+"/actions/maintenance-on", tc.form, tc.hdr)
			if p.status != http.StatusForbidden || !strings.Contains(p.body, "This form was refused") {
				t.Fatalf("%s: %d\n%s", name, p.status, mainOf(p.body))
			}
		}
		var st struct{ Status string }
		s.mustAPI(200, "GET", "/api/v1/orgs/acme/machines/"+mine, acme["viewer"], nil, &st)
		if st.Status != "preregistered" {
			t.Fatalf("a refused form changed the machine: %s", st.Status)
		}
		// the sign-in form has its own token (login CSRF)
		fresh := s.client()
		p := fresh.post("/ui/sign-in", url.Values{"token": {acme["admin"]}}, nil)
		if p.status != http.StatusForbidden || fresh.get("/ui/orgs/acme/machines").status != http.StatusSeeOther {
			t.Fatalf("sign-in without its form token: %d", p.status)
		}
	})

	t.Run("roles decide the buttons and the API refuses the rest", func(t *testing.T) {
		m := "/ui/orgs/acme/machines/" + mine
		viewer, operator, admin := s.client(), s.client(), s.client()
		viewer.signIn(acme["viewer"])
		operator.signIn(acme["operator"])
		admin.signIn(acme["admin"])
		if p := viewer.get(m); strings.Contains(p.body, "confirm?action=") || strings.Contains(viewer.get("/ui/orgs/acme/machines").body, "Register Machine") {
			t.Fatal("a viewer sees write buttons")
		}
		operator.get(m).mustContain(t, "confirm?action=assign", "confirm?action=delete")
		if strings.Contains(operator.get("/ui/orgs/acme/settings").body, "Issue API token") {
			t.Fatal("an operator sees the token form")
		}
		admin.get("/ui/orgs/acme/settings").mustContain(t, "Issue API token", "Issue enrollment token")

		// a write forged by hand, with a valid CSRF token: the API says no
		pg := viewer.get(m)
		p := viewer.post(m+"/actions/maintenance-on", url.Values{"csrf": {pg.field("csrf")}}, nil)
		if p.status != http.StatusForbidden {
			t.Fatalf("a viewer's forged write: %d\n%s", p.status, mainOf(p.body))
		}
		p.mustContain(t, "Your role may not do this", "this needs the operator role; the token has viewer")
		p = viewer.post("/ui/orgs/acme/tokens", url.Values{"csrf": {pg.field("csrf")}, "name": {"sneaky"}, "role": {"admin"}}, nil)
		if p.status != http.StatusForbidden {
			t.Fatalf("a viewer issuing a token: %d", p.status)
		}
	})

	t.Run("an enrollment token with a cap", func(t *testing.T) {
		admin := s.client()
		admin.signIn(acme["admin"])
		pg := admin.get("/ui/orgs/acme/settings")
		issue := func(max string) page {
			return admin.post("/ui/orgs/acme/enrollment-tokens", url.Values{"csrf": {pg.field("csrf")}, "name": {"capped-" + max}, "max_machines": {max}}, nil)
		}
		if p := issue("5"); p.status != http.StatusCreated {
			t.Fatalf("issue with a cap: %d\n%s", p.status, mainOf(p.body))
		}
		admin.get("/ui/orgs/acme/settings").mustContain(t, "capped-5", "0 of at most 5")
		for _, bad := range []string{"lots", "-3"} {
			p := issue(bad)
			if p.status != http.StatusUnprocessableEntity {
				t.Fatalf("max_machines %q: %d\n%s", bad, p.status, mainOf(p.body))
			}
			p.mustContain(t, "<code>max_machines</code>")
		}
	})

	t.Run("another organization answers 404", func(t *testing.T) {
		c := s.client()
		c.signIn(acme["admin"])
		for _, path := range []string{"/ui/orgs/globex/machines/" + theirs, "/ui/orgs/acme/machines/" + theirs, "/ui/orgs/globex/machines", "/ui/orgs/nope/pools"} {
			p := c.get(path)
			if p.status != http.StatusNotFound {
				t.Fatalf("%s: %d", path, p.status)
			}
			if showsHost(p.body, "g1") {
				t.Fatalf("%s shows globex's machine", path)
			}
		}
	})

	t.Run("user input is escaped", func(t *testing.T) {
		c := s.client()
		c.signIn(acme["admin"])
		p := c.get("/ui/orgs/acme/machines")
		if strings.Contains(p.body, `<script>alert("org")</script>`) {
			t.Fatal("the organization's display name is not escaped")
		}
		p.mustContain(t, "ACME &lt;script&gt;alert(&#34;org&#34;)&lt;/script&gt;")
		// an invalid value comes back into the form, escaped, with the
		// API's reason next to the field
		pg := c.get("/ui/orgs/acme/machines/new")
		p = c.post("/ui/orgs/acme/machines", url.Values{"csrf": {pg.field("csrf")}, "uuid": {`"><img src=x onerror=alert(1)>`}, "hostname": {"w2"}}, nil)
		if p.status != http.StatusUnprocessableEntity {
			t.Fatalf("an invalid UUID: %d", p.status)
		}
		if strings.Contains(p.body, `<img src=x`) {
			t.Fatal("the UUID is not escaped")
		}
		p.mustContain(t, `id="uuid-err"`, `&#34;&gt;&lt;img src=x onerror=alert(1)&gt;`)
	})

	t.Run("register and act", func(t *testing.T) {
		c := s.client()
		c.signIn(acme["operator"])
		pg := c.get("/ui/orgs/acme/machines/new")
		id := "4c4c4544-0035-4b10-8056-00000000a002"
		p := c.post("/ui/orgs/acme/machines", url.Values{"csrf": {pg.field("csrf")}, "idem": {pg.field("idem")}, "uuid": {strings.ToUpper(id)},
			"hostname": {"w2"}, "labels": {"rack=r2\nzone=b"}, "upgrade_index": {"3"}}, nil)
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/ui/orgs/acme/machines/"+id+"?after=") {
			t.Fatalf("register: %d %s\n%s", p.status, p.header.Get("Location"), mainOf(p.body))
		}
		c.get(p.header.Get("Location")).mustContain(t, "Machine "+id+" is registered", "rack=r2, zone=b", "preregistered")
		// the same form sent twice (a double click) acts once
		p = c.post("/ui/orgs/acme/machines", url.Values{"csrf": {pg.field("csrf")}, "idem": {pg.field("idem")}, "uuid": {strings.ToUpper(id)},
			"hostname": {"w2"}, "labels": {"rack=r2\nzone=b"}, "upgrade_index": {"3"}}, nil)
		if p.status != http.StatusSeeOther {
			t.Fatalf("the replayed form: %d\n%s", p.status, mainOf(p.body))
		}
		// assign through the confirmation page
		confirm := c.get("/ui/orgs/acme/machines/" + id + "/confirm?action=assign")
		confirm.mustContain(t, "Assign to pool?", "joins the pool you choose", `<option value="workers">`)
		p = c.post("/ui/orgs/acme/machines/"+id+"/actions/assign", url.Values{"csrf": {confirm.field("csrf")}, "pool": {"workers"}}, nil)
		if p.status != http.StatusSeeOther {
			t.Fatalf("assign: %d\n%s", p.status, mainOf(p.body))
		}
		c.get(p.header.Get("Location")).mustContain(t, "Assigned to pool workers.", `href="/ui/orgs/acme/pools/workers"`)
		// a state that forbids the action: the API's reason, and what to do
		p = c.post("/ui/orgs/acme/machines/"+id+"/actions/abort-deletion", url.Values{"csrf": {confirm.field("csrf")}}, nil)
		if p.status != http.StatusConflict {
			t.Fatalf("abort the deletion of a machine not being deleted: %d\n%s", p.status, mainOf(p.body))
		}
		p.mustContain(t, "Not possible right now", "The API said:", "What to do:")
	})

	t.Run("pool save: field errors, Save, and a stale form", func(t *testing.T) {
		c := s.client()
		c.signIn(acme["admin"])
		pg := c.get("/ui/orgs/acme/pools/workers")
		pg.mustContain(t, "Workers &lt;img src=x onerror=alert(1)&gt;", `name="apply" value="1"`)
		form := url.Values{"csrf": {pg.field("csrf")}, "version": {pg.field("version")}, "display_name": {"Workers"},
			"kubernetes.minor": {"1.99"}, "flatcar.channel": {"stable"}, "flatcar.version": {"4230.2.3"}, "apply": {"0"}}
		p := c.post("/ui/orgs/acme/pools/workers", form, nil)
		if p.status != http.StatusUnprocessableEntity {
			t.Fatalf("an unsupported minor: %d\n%s", p.status, mainOf(p.body))
		}
		p.mustContain(t, `id="f-minor" name="kubernetes.minor" required value="1.99"`, `aria-invalid="true" aria-describedby="err-minor"`, `id="err-minor"`)
		form.Set("kubernetes.minor", "1.37")
		form.Set("message", "to 1.37")
		p = c.post("/ui/orgs/acme/pools/workers", form, nil)
		if p.status != http.StatusSeeOther {
			t.Fatalf("save: %d\n%s", p.status, mainOf(p.body))
		}
		c.get(p.header.Get("Location")).mustContain(t, "Saved as revision 2.", "It is not rolled out yet", "to 1.37")
		// the same form again, on the version it was read at: refused
		form.Set("display_name", "Renamed")
		p = c.post("/ui/orgs/acme/pools/workers", form, nil)
		if p.status != http.StatusPreconditionFailed {
			t.Fatalf("a stale pool form: %d\n%s", p.status, mainOf(p.body))
		}
		p.mustContain(t, "Someone changed it first")
	})
}
