package anvilctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/cli/anvilctl"
	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
	revisions "github.com/anvil-fleet/anvil/services/revisions/service"
)

const adminToken = "anvil_admin_cli_test_bootstrap_token_0123456789"

type cliStack struct {
	t    *testing.T
	base string
	st   *devstack.Stack
	env  map[string]string
	// adminTok is acme's admin token
	adminTok string
	// boot is the boot service's URL
	boot string
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startStack runs the whole control plane (devstack) and makes org acme
// with an admin and a viewer token.
func startStack(t *testing.T) (*cliStack, string, string) {
	t.Helper()
	addr, bootAddr := freeAddr(t), freeAddr(t)
	// The simulator's assets for the default catalog: pools are saved only
	// when the boot service has their files.
	assets, err := simassets.Dir(t.TempDir(), revisions.DefaultKubernetesVersions...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := devstack.Start(context.Background(), devstack.Config{DataDir: t.TempDir(), GatewayAddr: addr, BootAddr: bootAddr,
		AdminToken: adminToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AssetsDir: assets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	s := &cliStack{t: t, base: "http://" + addr, st: st, boot: "http://" + bootAddr}
	admin, viewer := s.setUp()
	return s, admin, viewer
}

// setUp waits for the gateway, then makes org acme with an admin and a
// viewer token.
func (s *cliStack) setUp() (string, string) {
	t := s.t
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(s.base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// the gateway may be ready a moment before the registry answers (503)
	s.eventually(func() bool {
		st := s.http("POST", "/api/v1/orgs", adminToken, `{"id":"acme","display_name":"ACME"}`, nil)
		return st == 201 || st == 409
	})
	var admin, viewer struct{ Token string }
	s.eventually(func() bool {
		var raw json.RawMessage
		st := s.http("POST", "/api/v1/orgs/acme/tokens", adminToken, `{"name":"cli-admin","role":"admin"}`, &raw)
		if st != 201 {
			t.Logf("issue token: %d %s", st, raw)
			return false
		}
		return json.Unmarshal(raw, &admin) == nil
	})
	s.http("POST", "/api/v1/orgs/acme/tokens", adminToken, `{"name":"cli-viewer","role":"viewer"}`, &viewer)
	s.adminTok = admin.Token
	s.env = map[string]string{"HOME": t.TempDir(), "ANVIL_URL": s.base, "ANVIL_TOKEN": admin.Token, "ANVIL_ORG": "acme"}
	// tokens are verified through the registry's projection: wait for it
	s.eventually(func() bool { _, _, err := s.run("get", "orgs"); return err == nil })
	s.eventually(func() bool { return s.http("GET", "/api/v1/orgs/acme", viewer.Token, "", nil) == 200 })
	return admin.Token, viewer.Token
}

func (s *cliStack) http(method, path, tok, body string, out any) int {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if out != nil {
		_ = json.Unmarshal(data, out)
	}
	return res.StatusCode
}

// eventually retries cond: reads come from projections that follow the
// log, so a write shows up in lists a moment later.
func (s *cliStack) eventually(cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatal("condition not met in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs anvilctl in-process with the stack's environment.
func (s *cliStack) run(args ...string) (string, string, error) {
	return s.runCtx(context.Background(), nil, args...)
}

func (s *cliStack) runCtx(ctx context.Context, stdout io.Writer, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	var w io.Writer = &out
	if stdout != nil {
		w = io.MultiWriter(&out, stdout)
	}
	root := anvilctl.NewRoot(anvilctl.Env{Stdout: w, Stderr: &errb, Getenv: func(k string) string { return s.env[k] }, HTTP: http.DefaultClient})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

func (s *cliStack) must(args ...string) string {
	s.t.Helper()
	out, errOut, err := s.run(args...)
	if err != nil {
		s.t.Fatalf("anvilctl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const uuid = "4c4c4544-0035-4b10-8056-c7c04f4e0001"

// fleet's kubeconfig names a port nothing listens on, so that its rollouts
// fail their cluster_reachable check at once, whatever the machine's DNS
// does with a name that does not resolve (a lookup that hung took a
// retried rollout's checks past a test's wait).
const fleet = `kind: Cluster
name: prod
api_endpoint: https://api.prod.example:6443
kubernetes_version: 1.34.1
kubeconfig: |
  apiVersion: v1
  kind: Config
  clusters:
  - name: prod
    cluster: {server: 'https://127.0.0.1:1'}
  users:
  - name: drain
    user: {token: t0k3n}
  contexts:
  - name: prod
    context: {cluster: prod, user: drain}
  current-context: prod
bootstrap_token: k8sabc.s3cr3tt0k3nv4lu3
ca_cert_hash: sha256:abababababababababababababababababababababababababababababababab
---
kind: Pool
name: workers
cluster: prod
display_name: Workers
kubernetes: {minor: "1.33"}
flatcar: {channel: stable, version: 4230.2.3}
---
kind: Machine
uuid: 4C4C4544-0035-4B10-8056-C7C04F4E0001
hostname: w1
labels: {rack: r1}
pool: workers
`

// The CLI against the whole control plane over HTTP: apply, get, describe,
// time travel, events and delete.
func TestCLIAgainstStack(t *testing.T) {
	s, _, viewer := startStack(t)

	out := s.must("apply", "-f", writeFile(t, "fleet.yaml", fleet))
	for _, want := range []string{"cluster/prod created", "pool/workers created (revision 1)", "machine/" + uuid + " created (pre-registered)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply: %q lacks %q", out, want)
		}
	}
	// re-applying changes nothing (the sealed secrets are kept)
	s.eventually(func() bool { out, _, _ := s.run("get", "machines"); return strings.Contains(out, "w1") })
	out = s.must("apply", "-f", writeFile(t, "fleet.yaml", fleet))
	if !strings.Contains(out, "cluster/prod unchanged (kubeconfig and bootstrap_token kept") || !strings.Contains(out, "pool/workers unchanged") ||
		!strings.Contains(out, "machine/"+uuid+" unchanged") {
		t.Fatalf("re-apply: %s", out)
	}

	out = s.must("get", "pools")
	if !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "workers") || !strings.Contains(out, "prod") || !strings.Contains(out, "1.33") {
		t.Fatalf("get pools: %s", out)
	}
	var list struct{ Items []map[string]any }
	if err := json.Unmarshal([]byte(s.must("get", "machines", "-o", "json", "--pool", "workers", "-l", "rack=r1")), &list); err != nil ||
		len(list.Items) != 1 || list.Items[0]["hostname"] != "w1" {
		t.Fatalf("get machines -o json: %+v %v", list, err)
	}
	if out := s.must("get", "machine", uuid, "-o", "yaml"); !strings.Contains(out, "hostname: w1\n") {
		t.Fatalf("get machine -o yaml: %s", out)
	}
	if out := s.must("get", "clusters"); !strings.Contains(out, "https://api.prod.example:6443") || strings.Contains(out, "t0k3n") {
		t.Fatalf("get clusters: %s", out)
	}

	// change the hostname; the machine as it was before still reads w1
	time.Sleep(20 * time.Millisecond)
	before := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(20 * time.Millisecond)
	out = s.must("apply", "-f", writeFile(t, "m.yaml", "kind: Machine\nuuid: "+uuid+"\nhostname: w1b\n"))
	if !strings.Contains(out, "configured") {
		t.Fatalf("apply hostname: %s", out)
	}
	s.eventually(func() bool { out, _, _ := s.run("get", "machine", uuid); return strings.Contains(out, "w1b") })
	if out := s.must("get", "machine", uuid, "--at", before); !strings.Contains(out, " w1 ") {
		t.Fatalf("get machine --at: %s", out)
	}

	// Save & Apply a Kubernetes minor change
	pool := "kind: Pool\nname: workers\ncluster: prod\ndisplay_name: Workers\nkubernetes: {minor: \"1.34\"}\nflatcar: {channel: stable, version: 4230.2.3}\n"
	out = s.must("apply", "-f", writeFile(t, "pool.yaml", pool), "--apply")
	if !strings.Contains(out, "pool/workers configured (revision 2, rolling out revision 2 as rollout/ro-") {
		t.Fatalf("save & apply: %s", out)
	}
	// the real rollout service started it; with no reachable cluster its
	// sanity checks fail and nothing is touched: the watch says so (exit 2)
	var ros struct{ Items []struct{ ID, Status string } }
	s.eventually(func() bool {
		out, _, err := s.run("get", "rollouts", "--pool", "workers", "-o", "json")
		return err == nil && json.Unmarshal([]byte(out), &ros) == nil && len(ros.Items) == 1
	})
	out, _, err := s.run("rollout", "status", ros.Items[0].ID, "--watch")
	if err == nil || !strings.Contains(err.Error(), "rollout "+ros.Items[0].ID+" failed") ||
		!strings.Contains(out, "rollout "+ros.Items[0].ID+": pool workers, revision 2") || !strings.Contains(out, "done") {
		t.Fatalf("watch the real rollout: %v\n%s", err, out)
	}
	if out := s.must("get", "operations", "--kind", "rollout"); !strings.Contains(out, ros.Items[0].ID) {
		t.Fatalf("get operations: %s", out)
	}
	if out := s.must("rollout", "abort", ros.Items[0].ID, "--reason", "no cluster"); !strings.Contains(out, "aborted") {
		t.Fatalf("abort: %s", out)
	}

	out = s.must("get", "revisions", "--pool", "workers")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "NUMBER") {
		t.Fatalf("get revisions: %s", out)
	}
	if out := s.must("get", "revision", "2", "--pool", "workers", "-o", "json"); !strings.Contains(out, `"kubernetes_version": "1.34`) {
		t.Fatalf("get revision 2: %s", out)
	}
	if out := s.must("get", "revisions", "--machine", uuid); !strings.Contains(out, "NUMBER") {
		t.Fatalf("get revisions --machine: %s", out)
	}

	out = s.must("describe", "machine", uuid)
	for _, want := range []string{"machine/" + uuid, "Hostname: w1b", "Labels:\n  Rack: r1", "Events:", "machine.preregistered", "cli-admin"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe machine lacks %q:\n%s", want, out)
		}
	}
	out = s.must("events", "--aggregate", "machine/"+uuid, "--since", "1h")
	if !strings.Contains(out, "machine.preregistered") || !strings.Contains(out, "machine.hostname_changed") {
		t.Fatalf("events: %s", out)
	}
	if out := s.must("events", "--aggregate", "machine/"+uuid, "--since", "1h", "--type", "machine.preregistered", "-o", "json"); strings.Contains(out, "hostname_changed") {
		t.Fatalf("events --type: %s", out)
	}
	if out := s.must("get", "events", "--aggregate", "pool/workers", "--limit", "1"); strings.Count(strings.TrimSpace(out), "\n") != 1 {
		t.Fatalf("get events --limit 1: %s", out)
	}

	// errors come back as the API's problems
	s.env["ANVIL_TOKEN"] = viewer
	if _, _, err := s.run("delete", "pool", "workers"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("viewer deletes: %v", err)
	}
	if _, _, err := s.run("get", "machine", "4c4c4544-0035-4b10-8056-c7c04f4e9999"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing machine: %v", err)
	}
	if _, _, err := s.run("get", "machines", "--token", "nonsense"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad token: %v", err)
	}
	s.env["ANVIL_TOKEN"] = ""
	if _, _, err := s.run("apply", "-f", writeFile(t, "bad.yaml", "kind: Pool\nname: Bad Pool\n"), "--token", s.adminTok); err == nil || !strings.Contains(err.Error(), "422") {
		t.Fatalf("bad pool: %v", err)
	}
	s.env["ANVIL_TOKEN"] = s.adminTok

	out = s.must("delete", "machine", uuid, "--policy", "forced")
	if !strings.Contains(out, "machine/"+uuid) {
		t.Fatalf("delete machine: %s", out)
	}
}
