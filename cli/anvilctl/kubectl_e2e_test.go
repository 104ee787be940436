package anvilctl_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/cli/anvilctl"
)

const (
	poolDoc = `kind: Pool
name: workers
cluster: prod
display_name: Workers
kubernetes: {minor: "1.33"}
flatcar: {channel: stable, version: 4230.2.3}
`
	m1 = "4c4c4544-0035-4b10-8056-c7c04f4e0001"
	m2 = "4c4c4544-0035-4b10-8056-c7c04f4e0002"
	m3 = "4c4c4544-0035-4b10-8056-c7c04f4e0003"
)

// clusterDoc is fleet's cluster.
var clusterDoc = strings.SplitN(fleet, "---\n", 2)[0]

func machineDoc(uuid, host, rack string) string {
	return "kind: Machine\nuuid: " + uuid + "\nhostname: " + host + "\nlabels: {rack: " + rack + "}\npool: workers\n"
}

// runCode runs a command line as Main does and returns its exit code and
// streams.
func (s *cliStack) runCode(args ...string) (int, string, string) {
	b := s.start(context.Background(), args...)
	code := b.wait(s.t)
	return code, b.out.String(), b.errb.String()
}

// kubectl habits against the whole control plane: manifests read as
// kubectl reads them, the ways of naming objects, every output format,
// diff and dry runs, watches, contexts, the first steps without curl, and
// the version.
func TestCLIKubectlHabits(t *testing.T) {
	s, _, viewer := startStack(t)

	// A tree of manifests; the pool follows "--- # comment", which the old
	// splitter dropped without a word.
	dir := t.TempDir()
	put := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	put("10-cluster.yaml", clusterDoc+"--- # the pool of workers\n"+poolDoc)
	put("notes.txt", "not a manifest")
	put("racks/20-machines.yaml", machineDoc(m1, "w1", "r1")+"---   # rack 2\n"+machineDoc(m2, "w2", "r2")+"---\n# nothing here\n---\n"+machineDoc(m3, "w3", "r1"))

	// without -R only the directory's own files; a dry run writes nothing
	out := s.must("apply", "-f", dir, "--dry-run=client")
	if out != "cluster/prod created (dry run)\npool/workers created (dry run)\n" {
		t.Fatalf("apply -f dir --dry-run:\n%s", out)
	}
	if code, _, errOut := s.runCode("get", "clusters"); code != 0 || errOut != "No resources found.\n" {
		t.Fatalf("the dry run wrote: %d %q", code, errOut)
	}
	// a malformed document is an error naming the file and the document,
	// and nothing is applied
	bad := writeFile(t, "bad.yaml", poolDoc+"---\nkind: Machine\nuuid: [\n")
	if code, _, errOut := s.runCode("apply", "-f", bad); code != 1 || !strings.Contains(errOut, "error: "+bad+": document 2: ") {
		t.Fatalf("a malformed document: %d %s", code, errOut)
	}
	out = s.must("apply", "-R", "-f", dir)
	for _, want := range []string{"cluster/prod created\n", "pool/workers created (revision 1)\n", "machine/" + m1 + " created",
		"machine/" + m2 + " created", "machine/" + m3 + " created"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply -R lacks %q:\n%s", want, out)
		}
	}
	s.eventually(func() bool { out, _, _ := s.run("get", "machines", "-o", "name"); return strings.Count(out, "\n") == 3 })

	// in sync: diff says nothing, exit 0
	if code, out, errOut := s.runCode("diff", "-R", "-f", dir); code != 0 || out != "" || !strings.Contains(errOut, "kubeconfig kept: sealed, not compared") {
		t.Fatalf("diff in sync: %d\n%s\n%s", code, out, errOut)
	}

	// ways of naming objects
	out = s.must("get", "pools,clusters")
	if !strings.HasPrefix(out, "NAME           CLUSTER") || !strings.Contains(out, "\npool/workers   prod") || !strings.Contains(out, "\n\nNAME           ENDPOINT") ||
		!strings.Contains(out, "\ncluster/prod   https://api.prod.example:6443") {
		t.Fatalf("get pools,clusters:\n%s", out)
	}
	var l struct {
		APIVersion, Kind string
		Items            []map[string]any
	}
	if err := json.Unmarshal([]byte(s.must("get", "pool/workers", "cluster/prod", "-o", "json")), &l); err != nil || l.Kind != "List" || l.APIVersion != "v1" ||
		len(l.Items) != 2 || l.Items[0]["name"] != "workers" || l.Items[1]["api_endpoint"] != "https://api.prod.example:6443" {
		t.Fatalf("get pool/workers cluster/prod -o json: %+v %v", l, err)
	}
	out = s.must("get", "machines", "-o", "yaml")
	if !strings.HasPrefix(out, "apiVersion: v1\nitems:\n") || !strings.HasSuffix(out, "kind: List\n") || strings.Count(out, "\n  hostname: ") != 3 {
		t.Fatalf("get machines -o yaml:\n%s", out)
	}
	if out := s.must("get", "machine", strings.ToUpper(m2), "-o", "jsonpath={.hostname}"); out != "w2" {
		t.Fatalf("get machine -o jsonpath: %q", out)
	}
	if out := s.must("get", "machine", m2, m1, "-o", "name"); out != "machine/"+m2+"\nmachine/"+m1+"\n" {
		t.Fatalf("get machine a b -o name: %q", out)
	}

	// the selector goes to the server; on a kind without one it is an error
	if out := s.must("get", "machines", "-l", "rack=r1", "--sort-by", ".hostname", "-o", "jsonpath={.items[*].hostname}"); out != "w1 w3" {
		t.Fatalf("get machines -l rack=r1: %q", out)
	}
	if code, out, errOut := s.runCode("get", "pools", "-l", "rack=r1"); code != 1 || out != "" ||
		!strings.Contains(errOut, "error: pools cannot be filtered with --selector (-l) (it filters machines)") {
		t.Fatalf("get pools -l: %d %q %q", code, out, errOut)
	}
	out = s.must("get", "machines", "-o", "custom-columns=HOST:.hostname,RACK:.labels.rack,MISSING:.nothing", "--sort-by", "{.hostname}", "--no-headers")
	if out != "w1   r1   <none>\nw2   r2   <none>\nw3   r1   <none>\n" {
		t.Fatalf("custom-columns:\n%q", out)
	}
	if out := s.must("get", "machines", "--show-labels", "-l", "rack=r2"); !strings.HasSuffix(out, "   rack=r2\n") || !strings.Contains(out, "LABELS\n") {
		t.Fatalf("--show-labels:\n%s", out)
	}
	if out := s.must("get", "machines", "-o", "wide"); !strings.Contains(out, "NODE") || !strings.Contains(out, "CONTROL PLANE") {
		t.Fatalf("-o wide:\n%s", out)
	}
	// pages: every page is read, whatever its size; the events' older
	// ?after= is used when the server ignores ?cursor=
	if out := s.must("get", "machines", "--chunk-size", "1", "-o", "name"); strings.Count(out, "\n") != 3 {
		t.Fatalf("get machines in pages of 1:\n%s", out)
	}
	all := s.must("get", "events", "-o", "name")
	// (oldest first: what happened meanwhile comes after)
	if paged := s.must("get", "events", "--chunk-size", "2", "-o", "name"); !strings.HasPrefix(paged, all) || strings.Count(all, "\n") < 8 {
		t.Fatalf("events in pages of 2:\n%s\nall:\n%s", paged, all)
	}
	if out, errOut, err := s.run("get", "events", "--limit", "3", "-o", "name"); err != nil || strings.Count(out, "\n") != 3 || !strings.Contains(errOut, "(more:") {
		t.Fatalf("get events --limit 3: %v %q %q", err, out, errOut)
	}

	// diff and dry runs of changes
	changed := writeFile(t, "changed.yaml", strings.Replace(poolDoc, `minor: "1.33"`, `minor: "1.34"`, 1)+"---\n"+machineDoc(m1, "w1", "r9")+
		"---\n"+machineDoc("4c4c4544-0035-4b10-8056-c7c04f4e0004", "w4", "r1"))
	code, out, _ := s.runCode("diff", "-f", changed)
	for _, want := range []string{"--- live/pool/workers\n+++ desired/pool/workers\n", "-  minor: \"1.33\"\n+  minor: \"1.34\"\n",
		"--- live/machine/" + m1 + "\n", "-  rack: r1\n+  rack: r9\n", "--- /dev/null\n+++ desired/machine/4c4c4544-0035-4b10-8056-c7c04f4e0004\n", "+hostname: w4\n"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("diff (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "drain_timeout") || strings.Contains(out, "auto_apply") {
		t.Fatalf("diff shows what does not change:\n%s", out)
	}
	out = s.must("apply", "-f", changed, "--dry-run=server")
	if out != "pool/workers configured (dry run): a new revision\nmachine/"+m1+" configured (dry run)\nmachine/4c4c4544-0035-4b10-8056-c7c04f4e0004 created (dry run)\n" {
		t.Fatalf("apply --dry-run=server:\n%s", out)
	}
	settings := writeFile(t, "settings.yaml", strings.Replace(poolDoc, "Workers", "The workers", 1)+"rollout: {drain_timeout: 15m, max_unavailable: \"1\"}\n")
	if out := s.must("apply", "-f", settings, "--dry-run"); out != "pool/workers configured (dry run): settings only, no new revision\n" {
		t.Fatalf("apply --dry-run of a setting:\n%s", out)
	}
	if out := s.must("apply", "-f", changed, "--dry-run=client", "-o", "name"); out != "pool/workers\nmachine/"+m1+"\nmachine/4c4c4544-0035-4b10-8056-c7c04f4e0004\n" {
		t.Fatalf("apply --dry-run -o name:\n%s", out)
	}
	if out := s.must("get", "pool", "workers", "-o", "jsonpath={.latest_revision} {.spec.display_name}"); out != "1 Workers" {
		t.Fatalf("the dry runs wrote: %q", out)
	}
	if code, _, errOut := s.runCode("diff", "-f", filepath.Join(dir, "none.yaml")); code != 2 || !strings.Contains(errOut, "none.yaml") {
		t.Fatalf("diff of a missing file: %d %s", code, errOut)
	}

	// watch machines of rack r1 while one joins the rack and one leaves it
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	w := s.start(ctx, "get", "machines", "-l", "rack=r1", "-w", "--output-watch-events", "--watch-interval", "100ms",
		"-o", "custom-columns=HOST:.hostname,RACK:.labels.rack", "--sort-by", ".hostname")
	waitOutput(t, &w.out, "ADDED   w3     r1\n")
	s.must("apply", "-f", writeFile(t, "move.yaml", machineDoc(m2, "w2", "r1")+"---\n"+machineDoc(m3, "w3", "r2")))
	waitRow(t, &w.out, "ADDED", "w2", "r1")
	waitRow(t, &w.out, "DELETED", "w3", "r1")
	interrupt()
	if code := w.wait(t); code != 0 {
		t.Fatalf("get -w ended with %d: %s", code, w.errb.String())
	}
	if !strings.HasPrefix(w.out.String(), "EVENT   HOST   RACK\nADDED   w1     r1\nADDED   w3     r1\n") {
		t.Fatalf("the watch:\n%s", w.out.String())
	}

	// first steps without curl: an organization, its admin token, a
	// viewer's token, an enrollment token and the chain URL machines boot
	if out := s.must("create", "org", "globex", "--display-name", "Globex", "--token", adminToken); out != "org/globex created\n" {
		t.Fatalf("create org: %q", out)
	}
	// the registry takes the new organization a moment after its event
	var globexTok, errOut string
	s.eventually(func() bool {
		code, globexTok, errOut = s.runCode("create", "token", "ops", "--role", "admin", "--org", "globex", "--token", adminToken)
		return code == 0 || !strings.Contains(errOut, "404")
	})
	globexTok = strings.TrimSpace(globexTok)
	if code != 0 || !strings.HasPrefix(globexTok, "anvil_") || strings.Contains(globexTok, "\n") || !strings.Contains(errOut, "role admin") ||
		!strings.Contains(errOut, "shown once") {
		t.Fatalf("create token: %d %q %q", code, globexTok, errOut)
	}
	s.eventually(func() bool {
		out, _, err := s.run("get", "orgs", "-o", "name", "--token", globexTok, "--org", "globex")
		return err == nil && out == "org/globex\n"
	})
	code, viewTok, _ := s.runCode("create", "token", "--role", "viewer", "--duration", "1h")
	viewTok = strings.TrimSpace(viewTok)
	if code != 0 || viewTok == "" {
		t.Fatalf("create token --role viewer: %d", code)
	}
	s.eventually(func() bool { _, _, err := s.run("get", "pools", "--token", viewTok); return err == nil })
	if code, _, errOut := s.runCode("delete", "pool", "workers", "--token", viewTok); code != 1 || !strings.Contains(errOut, "403") {
		t.Fatalf("the new viewer deletes: %d %s", code, errOut)
	}
	if code, _, errOut := s.runCode("create", "org", "initech", "--token", viewer); code != 1 || !strings.Contains(errOut, "403") {
		t.Fatalf("an organization's token creates an organization: %d %s", code, errOut)
	}
	code, enrollTok, errOut := s.runCode("create", "enrollment-token", "rack-1", "--max-machines", "2", "--boot-server", s.boot)
	enrollTok = strings.TrimSpace(enrollTok)
	// the token on standard output only: standard error (CI logs) names
	// boot-url for the chain URL, which holds the token, and never shows it
	if code != 0 || !strings.HasPrefix(enrollTok, "anvil_") || !strings.Contains(errOut, "at most 2 machines") ||
		!strings.Contains(errOut, "anvilctl boot-url <the token>") || strings.Contains(errOut, enrollTok) || strings.Contains(errOut, "?token=") {
		t.Fatalf("create enrollment-token: %d %q %q", code, enrollTok, errOut)
	}
	// -o name would lose a new token: refused, and none is issued
	for _, args := range [][]string{{"create", "token", "lost", "--role", "viewer", "-o", "name"}, {"create", "enrollment-token", "lost", "-o", "name"},
		{"boot-url", "--new", "lost", "-o", "name", "--boot-server", s.boot}} {
		if code, out, errOut := s.runCode(args...); code != 1 || out != "" || !strings.Contains(errOut, "error: -o name: ") {
			t.Fatalf("%v: %d %q %q", args, code, out, errOut)
		}
	}
	if out := s.must("boot-url", enrollTok, "--boot-server", s.boot+"/"); !strings.HasPrefix(out, s.boot+"/boot.ipxe?token=anvil_") {
		t.Fatalf("boot-url: %q", out)
	}
	code, chain, errOut := s.runCode("boot-url", "--new", "rack-2", "--boot-server", s.boot)
	chain = strings.TrimSpace(chain)
	if code != 0 || !strings.HasPrefix(chain, s.boot+"/boot.ipxe?token=anvil_") || !strings.Contains(errOut, "created") {
		t.Fatalf("boot-url --new: %d %q %q", code, chain, errOut)
	}
	// the refused -o name issued nothing: once rack-2 (issued after them)
	// is listed, no token "lost" is
	var lists [2]struct{ Items []struct{ Name string } }
	s.eventually(func() bool {
		s.http("GET", "/api/v1/orgs/acme/enrollment-tokens", s.adminTok, "", &lists[0])
		for _, it := range lists[0].Items {
			if it.Name == "rack-2" {
				return true
			}
		}
		return false
	})
	s.http("GET", "/api/v1/orgs/acme/tokens", s.adminTok, "", &lists[1])
	for _, l := range lists {
		for _, it := range l.Items {
			if it.Name == "lost" {
				t.Fatalf("-o name issued a token anyway: %+v", lists)
			}
		}
	}
	// the boot service answers the chain URL with the chain script
	res, err := http.Get(chain)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(script), "#!ipxe") || !strings.Contains(string(script), "/ipxe?uuid=${uuid}") {
		t.Fatalf("the chain URL: %d\n%s", res.StatusCode, script)
	}

	// contexts: two control planes (here: two organizations) in the file
	home := t.TempDir()
	tokenFile := writeFile(t, "acme-token", s.adminTok+"\n")
	s.env = map[string]string{"HOME": home}
	s.must("config", "set-context", "acme", "--server", s.base, "--token-file", tokenFile, "--org", "acme", "--boot-server", s.boot)
	s.must("config", "set-context", "globex", "--server", s.base, "--token", globexTok, "--org", "globex")
	if out := s.must("get", "pool", "workers", "-o", "name"); out != "pool/workers\n" {
		t.Fatalf("the first context is the current one: %q", out)
	}
	if out := s.must("get", "orgs", "-o", "name", "--context", "globex"); out != "org/globex\n" {
		t.Fatalf("--context globex: %q", out)
	}
	s.must("config", "use-context", "globex")
	if code, _, errOut := s.runCode("get", "pool", "workers"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("globex has no pool workers: %d %s", code, errOut)
	}
	if out := s.must("boot-url", "tok", "--context", "acme"); out != s.boot+"/boot.ipxe?token=tok\n" {
		t.Fatalf("the context's boot server: %q", out)
	}
	// ANVIL_URL or --server naming another server does not take the
	// context's token there: the command stops (the gateway, named another
	// way, stands for the other server), until a token is given with it;
	// the context's organization stays
	other := strings.Replace(s.base, "127.0.0.1", "localhost", 1)
	s.env["ANVIL_URL"] = other
	if code, out, errOut := s.runCode("get", "orgs", "-o", "name"); code != 1 || out != "" ||
		!strings.Contains(errOut, "error: no token for "+other+": ANVIL_URL sets that server, and the token of context \"globex\" is for "+s.base) {
		t.Fatalf("ANVIL_URL with the context's token: %d %q %q", code, out, errOut)
	}
	s.env["ANVIL_TOKEN"] = globexTok
	if out := s.must("get", "orgs", "-o", "name"); out != "org/globex\n" {
		t.Fatalf("ANVIL_URL and ANVIL_TOKEN: %q", out)
	}
	delete(s.env, "ANVIL_URL")
	delete(s.env, "ANVIL_TOKEN")
	if code, _, errOut := s.runCode("get", "orgs", "--server", other); code != 1 || !strings.Contains(errOut, "--server sets that server") {
		t.Fatalf("--server with the context's token: %d %q", code, errOut)
	}
	if out := s.must("get", "orgs", "-o", "name", "--server", other, "--token", globexTok); out != "org/globex\n" {
		t.Fatalf("--server and --token: %q", out)
	}

	// the version: the client's, and the gateway's when it tells it; an
	// older gateway (404) gets a note, and exit 0
	code, out, errOut = s.runCode("version", "--context", "acme")
	if code != 0 || !strings.HasPrefix(out, "Client Version: ") {
		t.Fatalf("version: %d %q %q", code, out, errOut)
	}
	if !strings.Contains(out, "\nServer Version: ") && !strings.Contains(errOut, "does not tell its version") {
		t.Fatalf("version says nothing of the server: %q %q", out, errOut)
	}
	// a server that answers 404 to GET /version (here the gateway under a
	// path it does not serve)
	code, out, errOut = s.runCode("version", "--server", s.base+"/nowhere", "-o", "json")
	var v map[string]map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["clientVersion"]["version"] == nil || v["serverVersion"] != nil ||
		!strings.Contains(errOut, "note: the server at "+s.base+"/nowhere does not tell its version (GET /version: 404)") {
		t.Fatalf("version of an older server: %d %q %q", code, out, errOut)
	}
	if code := anvilctl.ExitCode(nil); code != 0 {
		t.Fatal(code)
	}
}
