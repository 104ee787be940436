package anvilctl

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigPrecedence(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, ".config", "anvil", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("server: http://file:8080/\ntoken: file-token\norg: file-org\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(home, "other.yaml")
	if err := os.WriteFile(other, []byte("org: other-org\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := func(set map[string]string) flagValues {
		fv := flagValues{set: map[string]bool{}}
		for k, v := range set {
			fv.set[k] = true
			switch k {
			case "server":
				fv.Server = v
			case "token":
				fv.Token = v
			case "org":
				fv.Org = v
			case "config":
				fv.ConfigPath = v
			}
		}
		return fv
	}
	for _, c := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  Config
		err   string
	}{
		{"defaults without a file", map[string]string{"HOME": t.TempDir()}, nil, Config{Server: DefaultServer}, ""},
		{"the file", map[string]string{"HOME": home}, nil, Config{Server: "http://file:8080", Token: "file-token", Org: "file-org"}, ""},
		{"XDG_CONFIG_HOME", map[string]string{"HOME": t.TempDir(), "XDG_CONFIG_HOME": filepath.Join(home, ".config")}, nil,
			Config{Server: "http://file:8080", Token: "file-token", Org: "file-org"}, ""},
		{"env over file", map[string]string{"HOME": home, EnvToken: "env-token", EnvOrg: "env-org"}, nil,
			Config{Server: "http://file:8080", Token: "env-token", Org: "env-org"}, ""},
		{"flags over env", map[string]string{"HOME": home, EnvToken: "env-token", EnvServer: "https://env"}, map[string]string{"token": "flag-token", "org": "flag-org"},
			Config{Server: "https://env", Token: "flag-token", Org: "flag-org"}, ""},
		{"ANVIL_CONFIG names the file", map[string]string{"HOME": home, EnvConfig: other}, nil, Config{Server: DefaultServer, Org: "other-org"}, ""},
		{"--config over ANVIL_CONFIG", map[string]string{"HOME": t.TempDir(), EnvConfig: "/nonexistent"}, map[string]string{"config": path},
			Config{Server: "http://file:8080", Token: "file-token", Org: "file-org"}, ""},
		{"a named file must exist", map[string]string{"HOME": home}, map[string]string{"config": "/nonexistent.yaml"}, Config{}, "no such file"},
		{"a bad server", map[string]string{"HOME": home}, map[string]string{"server": "ftp://x"}, Config{}, "http:// or https://"},
	} {
		got, err := resolveConfig(flags(c.flags), envOf(c.env))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
	bad := filepath.Join(home, "bad.yaml")
	_ = os.WriteFile(bad, []byte("sever: typo\n"), 0o600)
	if _, err := resolveConfig(flags(map[string]string{"config": bad}), envOf(nil)); err == nil || !strings.Contains(err.Error(), "sever") {
		t.Errorf("unknown config key: %v", err)
	}
}

func obj(s string) map[string]any {
	var m map[string]any
	if err := decode([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

func TestOutputFormats(t *testing.T) {
	cols := []column{field("UUID", "uuid"), field("HOSTNAME", "hostname"), field("LABELS", "labels"), field("SEEN", "last_seen"),
		field("CP", "control_plane"), field("DONE", "progress.done")}
	objs := []map[string]any{
		obj(`{"uuid":"u1","hostname":"w1","labels":{"zone":"b","rack":"r1"},"last_seen":"2026-11-02T09:00:01.123456Z","control_plane":true,"progress":{"done":12345678901}}`),
		obj(`{"uuid":"u2","labels":{}}`),
	}
	var b bytes.Buffer
	if err := printObjects(&b, FormatTable, cols, objs); err != nil {
		t.Fatal(err)
	}
	want := "UUID   HOSTNAME   LABELS           SEEN                   CP    DONE\n" +
		"u1     w1         rack=r1,zone=b   2026-11-02T09:00:01Z   yes   12345678901\n" +
		"u2     -          -                -                      -     -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := printObjects(&b, FormatJSON, cols, objs); err != nil {
		t.Fatal(err)
	}
	var back struct{ Items []map[string]any }
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Items) != 2 || !strings.Contains(b.String(), "12345678901") {
		t.Errorf("json: %s %v", b.String(), err)
	}
	b.Reset()
	if err := printObjects(&b, FormatYAML, cols, nil); err != nil || b.String() != "items: []\n" {
		t.Errorf("empty yaml: %q %v", b.String(), err)
	}
	b.Reset()
	if err := printObject(&b, FormatYAML, cols, objs[0]); err != nil || !strings.Contains(b.String(), "hostname: w1\n") || !strings.Contains(b.String(), "  rack: r1\n") {
		t.Errorf("yaml: %s %v", b.String(), err)
	}
	b.Reset()
	_ = describe(&b, obj(`{"hostname":"w1","labels":{"rack":"r1"},"failure":null,"disks":[{"name":"sda","size_bytes":1},{"name":"sdb"}],"ssh_keys":["a","b"],"empty":{}}`))
	want = "Disks:\n  - Name: sda\n    Size Bytes: 1\n  - Name: sdb\nHostname: w1\nLabels:\n  Rack: r1\nSsh Keys:\n  - a\n  - b\n"
	if b.String() != want {
		t.Errorf("describe:\n%s\nwant:\n%s", b.String(), want)
	}
	if err := checkFormat("wide"); err == nil {
		t.Error("-o wide accepted")
	}
}

func TestProgressAndLogLines(t *testing.T) {
	ro := obj(`{"id":"ro-1","pool":"workers","revision":2,"status":"running","progress":{"done":1,"total":4,"in_progress":1,"failed":0}}`)
	if got := progressLine(ro, 8); got != "[##------] 1/4 done, 1 in progress, 0 failed: running" {
		t.Errorf("progress: %q", got)
	}
	if got := progressLine(obj(`{"status":"pending"}`), 4); got != "[----] 0/0 done, 0 in progress, 0 failed: pending" {
		t.Errorf("empty progress: %q", got)
	}
	e := obj(`{"at":"2026-11-02T09:00:01.5Z","machine":"u1","node":"w1","step":"drain","outcome":"blocked","message":"PDB web"}`)
	if got := entryLine(e); got != "2026-11-02T09:00:01Z  w1  drain  blocked: PDB web" {
		t.Errorf("entry: %q", got)
	}
	var evs []sse
	err := readEvents(strings.NewReader(": hi\n\nid: 0\ndata: {\"a\":1}\n\nid: 1\ndata: x\ndata: y\n\nevent: end\ndata: {}\n\n"), func(e sse) error {
		evs = append(evs, e)
		return nil
	})
	if err != nil || len(evs) != 3 || evs[0].id != "0" || evs[1].data != "x\ny" || evs[2].event != "end" {
		t.Errorf("events: %+v %v", evs, err)
	}
}

func TestParseAt(t *testing.T) {
	now := time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"":                          "",
		"42":                        "42",
		"2h":                        "2026-11-02T10:00:00Z",
		"2026-11-02T09:00:00+01:00": "2026-11-02T08:00:00Z",
	} {
		if got, err := parseAt(in, now); err != nil || got != want {
			t.Errorf("parseAt(%q) = %q %v, want %q", in, got, err, want)
		}
	}
	if _, err := parseAt("yesterday", now); err == nil {
		t.Error("yesterday accepted")
	}
}

func TestParseManifests(t *testing.T) {
	ms, err := parseManifests("f.yaml", []byte("kind: Cluster\nname: prod\n---\napiVersion: anvil/v1\nkind: MachinePool\nname: workers\nkubernetes: {minor: \"1.34\"}\n---\n---\nkind: machine\nuuid: 4C4C4544-0035-4B10-8056-000000000001\nlabels: {rack: r1}\n"))
	if err != nil || len(ms) != 3 || ms[0].Kind != "cluster" || ms[1].Kind != "pool" || ms[1].Fields["apiVersion"] != nil ||
		ms[2].Name != "4c4c4544-0035-4b10-8056-000000000001" || ms[2].Fields["kind"] != nil {
		t.Fatalf("%+v %v", ms, err)
	}
	for _, bad := range []string{"name: x\n", "kind: Node\nname: x\n", "kind: Pool\n", "kind: Machine\nhostname: x\n", "- a\n", "kind: [\n"} {
		if _, err := parseManifests("f.yaml", []byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
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

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "widgets"}, "unknown kind"},
		{[]string{"get", "machines", "-o", "wide"}, "must be table, json or yaml"},
		{[]string{"get", "machines"}, "no organization"},
		{[]string{"get", "revisions", "--org", "acme"}, "--pool <pool> or --machine <uuid>"},
		{[]string{"get", "events", "x", "--org", "acme"}, "cannot be read one by one"},
		{[]string{"delete", "rollout", "r1", "--org", "acme"}, "cannot be deleted"},
		{[]string{"apply", "--org", "acme"}, "name a file"},
		{[]string{"get", "machine", "u1", "--at", "soon", "--org", "acme"}, "--at"},
		{[]string{"events", "--since", "soon", "--org", "acme"}, "--since"},
		{[]string{"rollout", "undo", "workers", "--org", "acme"}, `"to-revision" not set`},
		{[]string{"rollout", "undo", "workers", "--to-revision", "0", "--org", "acme"}, "--to-revision"},
		{[]string{"rollout", "undo", "--to-revision", "1", "--org", "acme"}, "accepts 1 arg"},
	} {
		var out bytes.Buffer
		root := NewRoot(Env{Stdout: &out, Stderr: &out, Getenv: envOf(map[string]string{"HOME": t.TempDir()})})
		root.SetArgs(c.args)
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	var out bytes.Buffer
	root := NewRoot(Env{Stdout: &out, Stderr: &out, Getenv: envOf(map[string]string{"HOME": t.TempDir()})})
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out.Reset()
		root.SetArgs([]string{"completion", shell})
		if err := root.Execute(); err != nil || !strings.Contains(out.String(), "anvilctl") {
			t.Errorf("completion %s: %v %.100s", shell, err, out.String())
		}
	}
}
