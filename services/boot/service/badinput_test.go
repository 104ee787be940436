package service_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// TestBadInputNeverFails sends every endpoint malformed, hostile and
// oversized requests: the iPXE endpoints answer a valid script with 200
// every time, the others a 4xx problem; nothing answers 5xx or panics.
func TestBadInputNeverFails(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid := uuidN(80)
	s.register("acme", uuid, macN(80), enroll)
	s.assign("acme", uuid, "workers", 1)
	_, ign := s.bootMachine("acme", uuid, macN(80), enroll)
	auth := "Bearer " + ign.credential

	huge := strings.Repeat("A", 64<<10)
	queries := []string{
		"", "token=", "token=%", "token=%zz", "token=a&token=b", "token=" + huge, "x=" + huge,
		"token=" + url.QueryEscape("${password} || shell"), "token=" + enroll + "&attempt=-1",
		"token=" + enroll + "&attempt=99999999999999999999999", "token=" + enroll + "&attempt=abc",
		"uuid=" + uuid, "uuid=" + uuid + "&mac=zz&token=" + enroll, "uuid=%00&mac=%00&token=%00",
		"uuid=" + strings.ToUpper(uuid) + "&mac=52-54-00-00-00-80&token=" + enroll,
		"uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-00-00-80&token=" + enroll,
		"uuid=" + uuid + "&mac=52-54-00-00-00-80&token=" + enroll + "&uuid=" + uuidN(81),
		";;;", "&&&", "=", "token=\xff\xfe", "token=" + url.QueryEscape("\n#!ipxe\nshell"),
	}
	for _, path := range []string{"/boot.ipxe", "/ipxe"} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut} {
			for _, q := range queries {
				r := do(t, http.DefaultClient, method, s.url+path+"?"+q, "", nil)
				if r.status != http.StatusOK {
					t.Errorf("%s %s?%.60s: %d", method, path, q, r.status)
					continue
				}
				if method == http.MethodHead {
					continue
				}
				checkScript(t, r)
				if strings.Contains(r.body, "${password}") || strings.Contains(r.body, "\nshell") {
					t.Errorf("%s %s?%.60s: input reached the script:\n%s", method, path, q, r.body)
				}
			}
		}
	}
	// A Host header that is not a URL host: the script falls back to the
	// listener's address instead of echoing it.
	req, _ := http.NewRequest(http.MethodGet, s.url+"/boot.ipxe?token="+enroll, nil)
	req.Host = "evil${x}.example"
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || bytes.Contains(b, []byte("evil")) {
			t.Errorf("hostile Host: %d\n%s", resp.StatusCode, b)
		}
	}

	type call struct {
		method, path, auth, body string
	}
	agent := "/agent/v1/machines/" + uuid
	calls := []call{
		{http.MethodGet, "/ignition", "", ""},
		{http.MethodGet, "/ignition?" + huge, "", ""},
		{http.MethodGet, "/ignition?uuid=%zz", "", ""},
		{http.MethodGet, "/ignition?uuid=" + uuid + "&uuid=" + uuid, "", ""},
		{http.MethodGet, "/ignition?uuid=" + uuid + "&token=" + huge[:600], "", ""},
		{http.MethodGet, "/ignition?uuid=" + uuid + "&token=pb1.%00.%00", "", ""},
		{http.MethodPost, "/ignition?uuid=" + uuid, "", ""},
		{http.MethodPost, agent + "/heartbeat", auth, ""},
		{http.MethodPost, agent + "/heartbeat", auth, "null"},
		{http.MethodPost, agent + "/heartbeat", auth, "[]"},
		{http.MethodPost, agent + "/heartbeat", auth, `{"booted_revision":42}`},
		{http.MethodPost, agent + "/heartbeat", auth, `{"booted_revision":"` + strings.Repeat("x", 300) + `"}`},
		{http.MethodPost, agent + "/heartbeat", auth, `{"booted_revision":"mr-\u0000"}`},
		{http.MethodPost, agent + "/heartbeat", auth, "{"},
		{http.MethodPost, agent + "/report", auth, `{"hardware":{"cpus":-1,"memory_bytes":-5}}`},
		{http.MethodPost, agent + "/report", auth, `{"hardware":{"cpus":1,"memory_bytes":1,"disks":[{"name":"a b"}],"nics":[{"name":"` + strings.Repeat("n", 99) + `","mac":"zz"}]},"startup_log":["` + strings.Repeat("\\u00ff", 3000) + `"],"reboot_required":{"required":true,"reason":"` + strings.Repeat("r", 5000) + `"}}`},
		{http.MethodPost, agent + "/report", auth, `{"booted_revision":"mr-ffffffffffffffffffff","hardware":{}}`},
		{http.MethodPost, agent + "/report", auth, `{"startup_log":` + strings.Repeat("[", 10000) + `}`},
		{http.MethodPost, agent + "/report", auth, `{"startup_log":["` + strings.Repeat("x", 5<<20) + `"]}`},
		{http.MethodGet, agent + "/instructions?wait=-1", auth, ""},
		{http.MethodGet, agent + "/instructions?wait=abc", auth, ""},
		{http.MethodGet, agent + "/instructions?wait=0", auth, ""},
		{http.MethodGet, agent + "/instructions?wait=99999999999999999999", auth, ""},
		{http.MethodPost, agent + "/instructions/nope/ack", auth, `{"status":"done"}`},
		{http.MethodPost, agent + "/instructions/" + url.PathEscape("a/b") + "/ack", auth, `{"status":"done"}`},
		{http.MethodPost, agent + "/instructions/" + strings.Repeat("i", 300) + "/ack", auth, `{"status":"done"}`},
		{http.MethodPost, agent + "/instructions/i-1/ack", auth, `{"status":"maybe"}`},
		{http.MethodPost, agent + "/instructions/i-1/ack", auth, `{"status":7}`},
		{http.MethodPost, agent + "/instructions/i-1/ack", auth, ``},
		{http.MethodDelete, agent + "/heartbeat", auth, ""},
		{http.MethodGet, "/agent/v1/machines/" + uuid + "/nope", auth, ""},
		{http.MethodGet, "/agent/v1/machines/%2e%2e/heartbeat", auth, ""},
		{http.MethodGet, "/agent/", "", ""},
		{http.MethodPost, "/agent/v1/machines/not-a-uuid/heartbeat", auth, "{}"},
		{http.MethodGet, "/assets/../../etc/passwd", "", ""},
		{http.MethodGet, "/assets/%2e%2e/%2e%2e/etc/passwd", "", ""},
		{http.MethodGet, "/assets/", "", ""},
		{http.MethodGet, "/sysext/missing.raw", "", ""},
		{http.MethodGet, "/sysext/kubernetes-v9.9.9-x86-64.raw", "", ""},
		{http.MethodGet, "/flatcar/stable/..%2f..%2f/x", "", ""},
		{http.MethodPost, "/assets/anvil-agent-linux-amd64", "", "x"},
		{http.MethodGet, "/nope", "", ""},
	}
	for _, c := range calls {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		r := do(t, http.DefaultClient, c.method, s.url+c.path, c.auth, body)
		name := fmt.Sprintf("%s %.80s %.40s", c.method, c.path, c.body)
		if r.status >= 500 {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
		if strings.HasPrefix(c.path, "/agent/") && r.status >= 400 && r.status != http.StatusMethodNotAllowed &&
			!strings.Contains(r.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d without a problem document (%s)", name, r.status, r.header.Get("Content-Type"))
		}
	}
	agentBin, err := os.ReadFile(filepath.Join(s.assets, "assets", "anvil-agent-linux-amd64"))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.get(s.url + "/assets/anvil-agent-linux-amd64"); r.status != http.StatusOK || r.body != string(agentBin) {
		t.Errorf("asset: %d %q", r.status, r.body)
	}
	// Garbage on the wire.
	conn, err := net.DialTimeout("tcp", s.boot.Addr, time.Second)
	if err == nil {
		_, _ = conn.Write([]byte("GET /ipxe?" + strings.Repeat("x", 2<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = conn.Close()
	}
	if strings.Contains(s.logs.String(), "panicked") {
		t.Errorf("a handler panicked:\n%s", s.logs.String())
	}
	// Still serving.
	checkScript(t, s.get(s.url+"/boot.ipxe?token="+enroll))
}

// TestDependenciesDown: with the revisions service and then the registry
// gone, every iPXE answer is still a script that says which dependency is
// missing and retries; Ignition and the agent API answer 503 with
// Retry-After, which Ignition and the agent retry.
func TestDependenciesDown(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	a := uuidN(90)
	s.register("acme", a, macN(90), enroll)
	s.assign("acme", a, "workers", 1)
	_, ign := s.bootMachine("acme", a, macN(90), enroll)
	next := chainTarget(t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, a, macN(90)))
	ignURL := parseBoot(t, s.ipxeGet(next, a, macN(90))).ignitionURL

	// A second machine, renamed once the revisions service is gone: its
	// new machine revision is cached nowhere (rendering it ahead fails).
	b := uuidN(91)
	s.register("acme", b, macN(91), enroll)
	s.assign("acme", b, "workers", 1)
	nextB := chainTarget(t, s.ipxeGet(s.url+"/boot.ipxe?token="+enroll, b, macN(91)))
	ignB := parseBoot(t, s.ipxeGet(nextB, b, macN(91))).ignitionURL

	s.stopRevisions()
	r, err := s.reg.Machine(s.ctx, "acme", b, machineSetHostname("worker-91"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s.waitMachine(r.Version)
	if r := s.get(ignB); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("Ignition without the revisions service: %d %s", r.status, r.body)
	}
	// The cached revision is still served: a revisions outage does not
	// stop machines whose configuration was rendered before.
	if r := s.get(ignURL); r.status != http.StatusOK {
		t.Errorf("cached Ignition: %d %s", r.status, r.body)
	}

	s.stopRegistry()
	// A machine answered from memory boots while the registry is away;
	// whether it still is depends on when the follower saw its last
	// Ignition run. These must ask.
	s.boot.App.Known.Reset()
	for _, u := range []string{next, nextB} {
		script := s.ipxeGet(u, a, macN(90))
		if !strings.Contains(script, "the registry is not available") {
			t.Errorf("registry down:\n%s", script)
		}
	}
	checkScript(t, s.get(s.url+"/boot.ipxe?token="+enroll)) // needs nothing but itself
	if r := s.get(ignURL); r.status != http.StatusServiceUnavailable {
		t.Errorf("Ignition without the registry: %d %s", r.status, r.body)
	}
	hb := do(t, http.DefaultClient, http.MethodPost, s.url+"/agent/v1/machines/"+a+"/heartbeat", "Bearer "+ign.credential, strings.NewReader(`{"booted_revision":""}`))
	if hb.status != http.StatusServiceUnavailable || hb.header.Get("Retry-After") == "" {
		t.Errorf("heartbeat without the registry: %d %s", hb.status, hb.body)
	}
	if n := s.metric(`anvil_boot_ipxe_refusals_total{reason="registry_unavailable"}`); n < 2 {
		t.Errorf("registry_unavailable refusals counted: %v", n)
	}
}

func machineSetHostname(h string) regapi.SetHostname { return regapi.SetHostname{Hostname: h} }
