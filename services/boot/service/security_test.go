package service_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anvil-fleet/anvil/services/boot/service"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// metric reads one series from the process's /metrics (what the boot
// service's admin listener serves; its public one has none).
func (s *stack) metric(name string) float64 {
	s.t.Helper()
	rec := httptest.NewRecorder()
	promhttp.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(strings.NewReader(rec.Body.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func (s *stack) machines(org string) []regapi.Machine {
	s.t.Helper()
	p, err := s.reg.ListMachines(s.ctx, regapi.MachineList{Org: org})
	if err != nil {
		s.t.Fatal(err)
	}
	return p.Items
}

// TestBadEnrollmentTokensRegisterNothing: a malformed, unknown, expired or
// revoked enrollment token registers nothing; the firmware is told why with
// a script (HTTP 200) and retries, and the refusal is counted.
func TestBadEnrollmentTokensRegisterNothing(t *testing.T) {
	s := newStack(t)
	s.org("acme")
	expiring := s.enrollToken("acme", time.Now().Add(1500*time.Millisecond))
	revoked := s.enrollToken("acme", time.Time{})
	tokens, err := s.reg.ListTokens(s.ctx, regapi.TokenListReq{Org: "acme", Kind: regapi.KindEnrollment})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range tokens.Items {
		if strings.Contains(revoked, "_"+info.ID+"_") {
			if _, err := s.reg.RevokeToken(s.ctx, regapi.TokenRevoke{Org: "acme", TokenID: info.ID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.waitOrg("acme")
	time.Sleep(1600 * time.Millisecond) // let the expiring token expire (the registry reads the real clock)
	before := s.metric(`anvil_boot_ipxe_refusals_total{reason="token_refused"}`)
	uuid, mac := uuidN(40), "52-54-00-00-00-40"
	for name, tok := range map[string]string{
		"malformed": "anvil_enroll_nope",
		"unknown":   "anvil_enroll_aaaaaaaaaaaaaaaa_" + strings.Repeat("b", 52),
		"expired":   expiring,
		"revoked":   revoked,
	} {
		script := s.ipxeGet(s.url+"/ipxe?uuid="+uuid+"&mac="+mac+"&token="+tok, uuid, mac)
		if !strings.Contains(script, "the enrollment token was refused") || !strings.Contains(chainTarget(t, script), "attempt=1") {
			t.Errorf("%s token: script\n%s", name, script)
		}
	}
	if after := s.metric(`anvil_boot_ipxe_refusals_total{reason="token_refused"}`); after-before != 4 {
		t.Errorf("refusals counted %v -> %v, want 4 more", before, after)
	}
	if got := s.machines("acme"); len(got) != 0 {
		t.Errorf("machines registered with bad tokens: %+v", got)
	}
}

// TestOrganizationsStayApart: a machine pre-registered in one organization
// is not touched, read or revealed by another organization's token; the
// other organization gets its own machine of that UUID.
func TestOrganizationsStayApart(t *testing.T) {
	s := newStack(t)
	s.org("acme")
	umbrella := s.org("umbrella")
	s.pool("acme", "workers")
	uuid, mac := uuidN(41), "52-54-00-00-00-41"
	if _, err := s.reg.Machine(s.ctx, "acme", uuid, regapi.PreRegister{UUID: uuid, Hostname: "secret-host", Pool: "workers"}, 0); err != nil {
		t.Fatal(err)
	}
	script := s.register("umbrella", uuid, mac, umbrella)
	if strings.Contains(script, "secret-host") || strings.Contains(script, "acme") || !strings.Contains(script, "organization umbrella") {
		t.Errorf("umbrella's boot shows acme's machine:\n%s", script)
	}
	m, err := s.machine("acme", uuid)
	if err != nil || m.Status != regapi.StatusPreregistered || !m.LastIPXEBootAt.IsZero() {
		t.Errorf("acme's machine was touched: %+v %v", m, err)
	}
	if got := s.machines("umbrella"); len(got) != 1 || got[0].UUID != uuid || got[0].Hostname != "" {
		t.Errorf("umbrella's machines: %+v", got)
	}
}

// TestAgentCredentials: a credential works only for the machine it was
// issued to, and never shows in an answer or a log.
func TestAgentCredentials(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	a, b := uuidN(50), uuidN(51)
	for i, uuid := range []string{a, b} {
		mac := macN(50 + i)
		s.register("acme", uuid, mac, enroll)
		s.assign("acme", uuid, "workers", 1)
	}
	_, ignA := s.bootMachine("acme", a, macN(50), enroll)
	_, ignB := s.bootMachine("acme", b, macN(51), enroll)
	hb := func(uuid, auth string) response {
		return do(t, http.DefaultClient, http.MethodPost, s.url+"/agent/v1/machines/"+uuid+"/heartbeat", auth, strings.NewReader(`{"booted_revision":""}`))
	}
	if r := hb(a, "Bearer "+ignA.credential); r.status != http.StatusNoContent {
		t.Fatalf("own credential: %d %s", r.status, r.body)
	}
	forgedOrg := strings.Replace(ignA.credential, "ac2_acme_", "ac2_umbrella_", 1)
	for name, tc := range map[string]struct {
		uuid, auth string
		status     int
	}{
		"A's credential on B":  {b, "Bearer " + ignA.credential, http.StatusUnauthorized},
		"B's credential on A":  {a, "Bearer " + ignB.credential, http.StatusUnauthorized},
		"other org":            {a, "Bearer " + forgedOrg, http.StatusUnauthorized},
		"no credential":        {a, "", http.StatusUnauthorized},
		"basic auth":           {a, "Basic " + ignA.credential, http.StatusUnauthorized},
		"garbage":              {a, "Bearer x", http.StatusUnauthorized},
		"the placeholder":      {a, "Bearer ANVIL_AGENT_CREDENTIAL_PLACEHOLDER_0F6C1B9E2D7A4853_REPLACED_BY_THE_BOOT_SERVICE", http.StatusUnauthorized},
		"upper-case UUID path": {strings.ToUpper(a), "Bearer " + ignA.credential, http.StatusUnprocessableEntity},
		"machine never booted": {uuidN(52), "Bearer " + ignA.credential, http.StatusUnauthorized},
		"nil UUID":             {"00000000-0000-0000-0000-000000000000", "Bearer " + ignA.credential, http.StatusUnprocessableEntity},
		"lower-case bearer ok": {a, "bearer " + ignA.credential, http.StatusNoContent},
	} {
		r := hb(tc.uuid, tc.auth)
		if r.status != tc.status {
			t.Errorf("%s: %d %s, want %d", name, r.status, r.body, tc.status)
		}
		if r.status >= 400 && !strings.Contains(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: not a problem document: %s", name, r.header.Get("Content-Type"))
		}
		if strings.Contains(r.body, ignA.credential) || strings.Contains(r.body, ignB.credential) {
			t.Errorf("%s: the answer shows a credential", name)
		}
	}
	if strings.Contains(s.logs.String(), ignA.credential) || strings.Contains(s.logs.String(), ignB.credential) {
		t.Error("a credential appears in the logs")
	}
}

// TestPerBootTokens: /ignition serves only the machine the token was issued
// to, only until it expires; refusals are HTTP errors that Ignition retries
// (403), never a config.
func TestPerBootTokens(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	a, b := uuidN(60), uuidN(61)
	s.register("acme", a, macN(60), enroll)
	s.assign("acme", a, "workers", 1)
	next := chainTarget(t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, a, macN(60)))
	u := parseBoot(t, s.ipxeGet(next, a, macN(60))).ignitionURL
	tok := u[strings.Index(u, "&token=")+len("&token="):]

	check := func(name, rawURL string, want int) {
		t.Helper()
		r := s.get(rawURL)
		if r.status != want {
			t.Errorf("%s: %d %s, want %d", name, r.status, r.body, want)
		}
		if r.status != http.StatusOK && strings.Contains(r.body, "ignition") && strings.Contains(r.body, "passwd") {
			t.Errorf("%s: a refusal carries a config", name)
		}
	}
	check("another machine", s.url+"/ignition?uuid="+b+"&token="+tok, http.StatusForbidden)
	check("tampered", s.url+"/ignition?uuid="+a+"&token="+tok[:len(tok)-4]+"AAAA", http.StatusForbidden)
	check("missing token", s.url+"/ignition?uuid="+a, http.StatusForbidden)
	check("enrollment token instead", s.url+"/ignition?uuid="+a+"&token="+enroll, http.StatusForbidden)
	check("bad uuid", s.url+"/ignition?uuid=nope&token="+tok, http.StatusUnprocessableEntity)
	check("valid", u, http.StatusOK)
	s.clock.advance(61 * time.Minute)
	check("expired", u, http.StatusForbidden)
	s.clock.advance(-61 * time.Minute)
	check("valid again before expiry", u, http.StatusOK)
	// A machine deleted since its boot gets nothing.
	if _, err := s.reg.Machine(s.ctx, "acme", a, regapi.Delete{Policy: regapi.DeletionForced}, 0); err != nil {
		t.Fatal(err)
	}
	s.eventually("deleted", 10*time.Second, func() (bool, string) {
		_, err := s.machine("acme", a)
		return err != nil, errString(err)
	})
	check("deleted machine", u, http.StatusForbidden)
}

// TestTLS: with a certificate, Ignition and the agent API are served over
// HTTPS (the boot script points Ignition there) and refused over plain
// HTTP, while iPXE keeps working over plain HTTP.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	s := newStack(t, func(o *stackOptions) {
		o.boot = func(c *service.Config) {
			c.TLSListen, c.TLSCert, c.TLSKey = "127.0.0.1:0", certFile, keyFile
		}
	})
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid := uuidN(70)
	s.register("acme", uuid, macN(70), enroll)
	s.assign("acme", uuid, "workers", 1)
	next := chainTarget(t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, uuid, macN(70)))
	b := parseBoot(t, s.ipxeGet(next, uuid, macN(70)))
	_, port, _ := net.SplitHostPort(s.boot.TLSAddr)
	if !strings.HasPrefix(b.ignitionURL, "https://127.0.0.1:"+port+"/ignition?") {
		t.Fatalf("Ignition URL %s is not on the TLS listener", b.ignitionURL)
	}
	plain := strings.Replace(b.ignitionURL, "https://127.0.0.1:"+port, s.url, 1)
	if r := s.get(plain); r.status != http.StatusForbidden || !strings.Contains(r.body, "HTTPS only") {
		t.Errorf("plain Ignition: %d %s", r.status, r.body)
	}
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	r := do(t, tlsClient, http.MethodGet, b.ignitionURL, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("Ignition over TLS: %d %s", r.status, r.body)
	}
	ign := parseIgnition(t, r.body)
	auth := "Bearer " + ign.credential
	body := `{"booted_revision":""}`
	if r := do(t, http.DefaultClient, http.MethodPost, s.url+"/agent/v1/machines/"+uuid+"/heartbeat", auth, strings.NewReader(body)); r.status != http.StatusForbidden {
		t.Errorf("plain agent API: %d %s", r.status, r.body)
	}
	if r := do(t, tlsClient, http.MethodPost, "https://"+s.boot.TLSAddr+"/agent/v1/machines/"+uuid+"/heartbeat", auth, strings.NewReader(body)); r.status != http.StatusNoContent {
		t.Errorf("agent API over TLS: %d %s", r.status, r.body)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and returns its files and a
// pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "anvil boot test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
