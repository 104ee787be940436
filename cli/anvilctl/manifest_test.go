package anvilctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The document after "--- # comment" was dropped by the hand-made
// splitter (exit 0); apimachinery's YAML reader keeps it.
func TestManifestsSeparatorWithComment(t *testing.T) {
	ms, err := parseManifests("f.yaml", []byte("kind: Cluster\nname: prod\n--- # the pool\nkind: Pool\nname: workers\n---   \n# only a comment\n---\n---\nkind: Machine\nuuid: 4C4C4544-0035-4B10-8056-000000000001\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Kind+"/"+m.Name)
	}
	want := []string{"cluster/prod", "pool/workers", "machine/4c4c4544-0035-4b10-8056-000000000001"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// the documents keep their numbers: the machine is the 4th (the empty
	// ones between are not counted by the reader, the comment-only one is)
	if ms[2].Source != "f.yaml (document 4)" {
		t.Errorf("source: %s", ms[2].Source)
	}
}

func TestParseManifests(t *testing.T) {
	ms, err := parseManifests("f.yaml", []byte("kind: Cluster\nname: prod\n---\napiVersion: anvil/v1\nkind: MachinePool\nname: workers\nkubernetes: {minor: \"1.34\"}\n---\n---\nkind: machine\nuuid: 4C4C4544-0035-4B10-8056-000000000001\nlabels: {rack: r1}\n"))
	if err != nil || len(ms) != 3 || ms[0].Kind != "cluster" || ms[1].Kind != "pool" || ms[1].Fields["apiVersion"] != nil ||
		ms[2].Name != "4c4c4544-0035-4b10-8056-000000000001" || ms[2].Fields["kind"] != nil {
		t.Fatalf("%+v %v", ms, err)
	}
	for _, c := range []struct{ in, want string }{
		{"name: x\n", "f.yaml (document 1): no kind"},
		{"kind: Node\nname: x\n", `kind "Node" cannot be applied`},
		{"kind: Pool\n", "a pool needs a name"},
		{"kind: Machine\nhostname: x\n", "needs its uuid"},
		{"- a\n", "must be a mapping"},
		{"kind: Cluster\nname: a\n---\nkind: [\n", "f.yaml: document 2: "},
		{"kind: Cluster\nname: a\n---\nkind: Pool\nname: b\nname: c\n", "f.yaml: document 2: "},
		{"kind: Cluster\nname: a\n---trailing\nkind: Pool\n", "invalid Yaml document separator"},
		{`{"kind":"Cluster","name":"a"} {"kind":`, "f.yaml: document 2: "},
		{"kind: List\nitems:\n- kind: Pool\n  name: a\n- name: b\n", "(document 1), item 2: no kind"},
	} {
		if _, err := parseManifests("f.yaml", []byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
	// JSON: one object, or a stream of them; numbers stay exact
	ms, err = parseManifests("f.json", []byte(`{"kind":"Machine","uuid":"U1","upgrade_index":12345678901234567}
{"kind":"Pool","name":"p"}`))
	if err != nil || len(ms) != 2 || ms[0].Fields["upgrade_index"] != json.Number("12345678901234567") || ms[1].Name != "p" {
		t.Fatalf("json: %+v %v", ms, err)
	}
	// a List of objects, as get -o yaml prints several
	ms, err = parseManifests("l.yaml", []byte("apiVersion: v1\nkind: List\nitems:\n- kind: Cluster\n  name: a\n- kind: Pool\n  name: b\n"))
	if err != nil || len(ms) != 2 || ms[1].Source != "l.yaml (document 1), item 2" {
		t.Fatalf("list: %+v %v", ms, err)
	}
	// nothing at all is no manifest, and no error
	if ms, err := parseManifests("e.yaml", []byte("# nothing\n---\n")); err != nil || len(ms) != 0 {
		t.Fatalf("empty: %+v %v", ms, err)
	}
}

func TestManifestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b.yaml", "a.json", "notes.txt", "sub/c.yml", "sub/deeper/d.yaml"} {
		p := filepath.Join(dir, f)
		_ = os.MkdirAll(filepath.Dir(p), 0o700)
		_ = os.WriteFile(p, []byte("{}"), 0o600)
	}
	rel := func(ps []string) string {
		var out []string
		for _, p := range ps {
			r, _ := filepath.Rel(dir, p)
			out = append(out, r)
		}
		return strings.Join(out, " ")
	}
	if got, err := manifestFiles([]string{dir}, false); err != nil || rel(got) != "a.json b.yaml" {
		t.Errorf("dir: %s %v", rel(got), err)
	}
	if got, err := manifestFiles([]string{dir}, true); err != nil || rel(got) != "a.json b.yaml sub/c.yml sub/deeper/d.yaml" {
		t.Errorf("-R dir: %s %v", rel(got), err)
	}
	if _, err := manifestFiles([]string{filepath.Join(dir, "sub", "deeper", "none")}, false); err == nil {
		t.Error("a missing file accepted")
	}
	empty := t.TempDir()
	if _, err := manifestFiles([]string{empty}, false); err == nil || !strings.Contains(err.Error(), "no .yaml") {
		t.Errorf("an empty dir: %v", err)
	}
}

func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b any
		same bool
	}{
		{nil, "", true}, {map[string]any{}, nil, true}, {false, nil, true},
		{map[string]any{"a": "b"}, map[string]any{"a": "b"}, true}, {3, json.Number("3"), true},
		{"x", "y", false}, {map[string]any{"a": "b"}, nil, false}, {2, nil, false},
	} {
		if got := sameJSON(c.a, c.b); got != c.same {
			t.Errorf("sameJSON(%v, %v) = %v", c.a, c.b, got)
		}
	}
}

// align spells the manifest as the server does where they mean the same,
// so that diff and dry runs show only real changes.
func TestAlign(t *testing.T) {
	live := obj(`{"name":"w","rollout":{"max_unavailable":1,"drain_timeout":"15m0s","node_ready_timeout":"2h0m0s"},
		"ssh_keys":["a","b"],"network":{},"auto_apply_platform_revisions":false,"kubernetes":{"minor":"1.34"},"taints":[{"key":"k","effect":"NoSchedule"},{"key":"j","effect":"NoSchedule"}]}`)
	desired := obj(`{"name":"w","rollout":{"max_unavailable":"1","drain_timeout":"15m","node_ready_timeout":"2h"},
		"ssh_keys":["b","a"],"kubernetes":{"minor":1.34},"taints":[{"key":"j","effect":"NoSchedule"},{"key":"k","effect":"NoSchedule","value":""}],"labels":{}}`)
	got := align(desired, live)
	if !reflect.DeepEqual(got, live) {
		a, _ := json.Marshal(got)
		t.Fatalf("aligned:\n%s\nwant\n%s", a, mustJSON(live))
	}
	desired["rollout"].(map[string]any)["drain_timeout"] = "20m"
	got = align(desired, live)
	if reflect.DeepEqual(got, live) || lookup(got, "rollout.drain_timeout") != "20m" || lookup(got, "rollout.node_ready_timeout") != "2h0m0s" {
		t.Fatalf("a real change: %s", mustJSON(got))
	}
	d, err := unifiedDiff("live/pool/w", "desired/pool/w", live, got.(map[string]any))
	if err != nil || !strings.Contains(d, "-  drain_timeout: 15m0s\n+  drain_timeout: 20m\n") || strings.Count(d, "\n-") != 1 {
		t.Fatalf("diff:\n%s %v", d, err)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func regexpMatch(s, re string) bool { return regexp.MustCompile(re).MatchString(s) }

func TestContexts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	tokenFile := filepath.Join(dir, "lab-token")
	_ = os.WriteFile(tokenFile, []byte("lab-secret\n"), 0o600)
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fv := func(set map[string]string) flagValues { return flagsWithConfig(path, set) }
	write(`current-context: prod
contexts:
- name: prod
  server: https://prod.example
  token: prod-token
  org: acme
  boot-server: http://10.0.0.2:8081/
- name: lab
  server: http://lab:8080
  token-file: lab-token
  org: lab-org
`)
	for _, c := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  Config
		err   string
	}{
		{"the current context", nil, nil, Config{Server: "https://prod.example", Token: "prod-token", Org: "acme", BootServer: "http://10.0.0.2:8081", Context: "prod"}, ""},
		{"the environment over the current context", map[string]string{EnvOrg: "env-org", EnvToken: "env-token"}, nil,
			Config{Server: "https://prod.example", Token: "env-token", Org: "env-org", BootServer: "http://10.0.0.2:8081", Context: "prod"}, ""},
		{"--context over the environment; its token from a file relative to the config", map[string]string{EnvToken: "env-token", EnvServer: "http://env"},
			map[string]string{"context": "lab"}, Config{Server: "http://lab:8080", Token: "lab-secret", Org: "lab-org", Context: "lab"}, ""},
		{"flags over --context", nil, map[string]string{"context": "lab", "token": "flag-token", "org": "o"},
			Config{Server: "http://lab:8080", Token: "flag-token", Org: "o", Context: "lab"}, ""},
		{"a missing context", nil, map[string]string{"context": "staging"}, Config{}, `context "staging" does not exist in ` + path + ": one of prod, lab"},
	} {
		got, err := resolveConfig(fv(c.flags), envOf(c.env))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
	_ = os.Remove(tokenFile)
	if _, err := resolveConfig(fv(map[string]string{"context": "lab"}), envOf(nil)); err == nil || !strings.Contains(err.Error(), "token-file") {
		t.Errorf("a missing token file: %v", err)
	}
	write("contexts:\n- name: a\n- name: a\n")
	if _, err := resolveConfig(fv(nil), envOf(nil)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a context twice: %v", err)
	}
	write("current-context: gone\ncontexts:\n- name: a\n")
	if _, err := resolveConfig(fv(nil), envOf(nil)); err == nil || !strings.Contains(err.Error(), "current-context") {
		t.Errorf("a current context that does not exist: %v", err)
	}
}

// runCLI runs a command line in-process as Main would, without a server.
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), Env{Stdout: &out, Stderr: &errb, Getenv: envOf(env)}, args)
	return code, out.String(), errb.String()
}

// config set-context, use-context, get-contexts, current-context and
// delete-context edit the file; an old file (no contexts) keeps working and
// becomes the context "default" when one is added.
func TestConfigContextCommands(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	path := filepath.Join(home, ".config", "anvil", "config.yaml")
	_ = os.MkdirAll(filepath.Dir(path), 0o700)
	_ = os.WriteFile(path, []byte("server: http://old:8080\ntoken: old-token-123456\norg: old\n"), 0o600)

	code, out, _ := runCLI(t, env, "config", "view")
	if code != 0 || !strings.Contains(out, "server: http://old:8080") || !strings.Contains(out, "org: old") || strings.Contains(out, "old-token-123456") {
		t.Fatalf("config view of an old file: %d %s", code, out)
	}
	tf := filepath.Join(home, "tok")
	_ = os.WriteFile(tf, []byte("lab-token\n"), 0o600)
	if code, out, errOut := runCLI(t, env, "config", "set-context", "lab", "--server", "http://lab:8080", "--token-file", tf, "--org", "acme"); code != 0 ||
		!strings.Contains(out, `Created context "lab"`) {
		t.Fatalf("set-context: %d %s %s", code, out, errOut)
	}
	// the old settings moved into "default", still in effect
	code, out, _ = runCLI(t, env, "config", "get-contexts")
	if code != 0 || !strings.Contains(out, "CURRENT   NAME") || !regexpMatch(out, `\*\s+default\s+http://old:8080\s+old`) || !strings.Contains(out, "file "+tf) {
		t.Fatalf("get-contexts:\n%s", out)
	}
	if _, out, _ := runCLI(t, env, "config", "current-context"); out != "default\n" {
		t.Fatalf("current-context: %q", out)
	}
	if code, out, _ := runCLI(t, env, "config", "use-context", "lab"); code != 0 || out != "Switched to context \"lab\".\n" {
		t.Fatalf("use-context: %d %q", code, out)
	}
	code, out, _ = runCLI(t, env, "config", "view", "-o", "json")
	var v Config
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Server != "http://lab:8080" || v.Org != "acme" || v.Context != "lab" || v.Token != "lab-…oken" {
		t.Fatalf("view after use-context: %d %s", code, out)
	}
	if _, out, _ := runCLI(t, env, "config", "view", "--context", "default", "-o", "jsonpath={.server}"); out != "http://old:8080" {
		t.Fatalf("view --context default: %q", out)
	}
	if code, _, _ := runCLI(t, env, "config", "set-context", "--current", "--org", "other"); code != 0 {
		t.Fatal("set-context --current")
	}
	if _, out, _ := runCLI(t, env, "config", "get-contexts", "-o", "name"); out != "default\nlab\n" {
		t.Fatalf("get-contexts -o name: %q", out)
	}
	if _, out, _ := runCLI(t, env, "config", "view", "-o", "jsonpath={.org}"); out != "other" {
		t.Fatalf("set-context --current --org: %q", out)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file's mode: %v %v", fi.Mode(), err)
	}
	if code, out, _ := runCLI(t, env, "config", "delete-context", "lab"); code != 0 || !strings.Contains(out, "It was the current context") {
		t.Fatalf("delete-context: %d %s", code, out)
	}
	if code, _, errOut := runCLI(t, env, "config", "current-context"); code != 1 || !strings.Contains(errOut, "no current context") {
		t.Fatalf("current-context after deleting it: %d %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, env, "config", "set-context", "x", "--token", "a", "--token-file", "b"); code != 1 || !strings.Contains(errOut, "give one") {
		t.Fatalf("--token and --token-file: %d %s", code, errOut)
	}
}

// Exit codes and messages as kubectl users expect.
func TestExitCodes(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir()}
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"rollout", "frobnicate"}, 1, "", "error: unknown command \"frobnicate\" for \"anvilctl rollout\"\nSee 'anvilctl rollout --help' for usage.\n"},
		{[]string{"rollout"}, 0, "Start, watch and control rollouts", ""},
		{[]string{"config", "nope"}, 1, "", "unknown command \"nope\" for \"anvilctl config\""},
		{[]string{"gte", "pools"}, 1, "", "Did you mean this?\n\tget"},
		{[]string{"get", "pools", "--nope"}, 1, "", "error: unknown flag: --nope\nSee 'anvilctl get --help' for usage."},
		{[]string{"get", "pools", "-l", "a=b", "--org", "acme"}, 1, "", "error: pools cannot be filtered with --selector (-l)"},
		{[]string{"version", "--client"}, 0, "Client Version: ", ""},
		{[]string{"version", "--client", "-o", "yaml"}, 0, "clientVersion:\n  go_version: go", ""},
		{[]string{"boot-url", "anvil_enroll_x/y", "--boot-server", "http://10.0.0.2:8081/"}, 0, "http://10.0.0.2:8081/boot.ipxe?token=anvil_enroll_x%2Fy\n", ""},
		{[]string{"boot-url", "t", "--boot-server", "https://boot", "-o", "jsonpath={.url}"}, 0, "https://boot/boot.ipxe?token=t", "iPXE has no HTTPS"},
		{[]string{"get", "machines", "--server", "http://127.0.0.1:1", "--org", "acme"}, 1, "", "error: "},
		// diff: 1 says there are differences, so errors are 2 (usage errors stay 1)
		{[]string{"diff", "-f", "/nonexistent.yaml", "--org", "acme"}, 2, "", "error: stat /nonexistent.yaml"},
		{[]string{"diff", "-f", "/nonexistent.yaml", "--context", "nope"}, 2, "", `error: --context: context "nope" does not exist`},
		{[]string{"diff", "--frobnicate"}, 1, "", "unknown flag"},
	} {
		code, out, errOut := runCLI(t, env, c.args...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, out, errOut, c.code, c.out, c.err)
		}
	}
	// Ctrl-C: the context is cancelled
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var errb bytes.Buffer
	if code := Run(ctx, Env{Stdout: &bytes.Buffer{}, Stderr: &errb, Getenv: envOf(env)},
		[]string{"get", "machines", "--server", "http://127.0.0.1:1", "--org", "acme"}); code != ExitInterrupted || errb.String() != "interrupted\n" {
		t.Errorf("interrupted: %d %q", code, errb.String())
	}
}
