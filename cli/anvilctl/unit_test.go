package anvilctl

import (
	"bytes"
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
	flags := flagsOf
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
	// (the log's Server-Sent Events are read by the client package:
	// client.FollowOperationLog)
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

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "widgets"}, "unknown kind"},
		{[]string{"get", "machines", "-o", "bogus"}, "must be one of table, wide, name, json, yaml"},
		{[]string{"get", "machines", "-o", "jsonpath={.items[}"}, "the template"},
		{[]string{"get", "machines", "-o", "custom-columns=NAME"}, "want HEADER:.path"},
		{[]string{"get", "machines", "--sort-by", "{{.x}}", "--org", "acme"}, "--sort-by"},
		{[]string{"get", "pools", "-l", "rack=r1", "--org", "acme"}, "pools cannot be filtered with --selector (-l) (it filters machines)"},
		{[]string{"get", "pools,machines", "--pool", "w", "--org", "acme"}, "pools cannot be filtered with --pool"},
		{[]string{"get", "clusters", "--status", "ready", "--org", "acme"}, "clusters cannot be filtered with --status"},
		{[]string{"get", "machine", "u1", "-l", "rack=r1", "--org", "acme"}, "filters lists: leave it out when naming machines"},
		{[]string{"get", "pool/workers", "machines", "--org", "acme"}, "either as kind/name or as a kind followed by names"},
		{[]string{"get", "pool/", "--org", "acme"}, "want kind/name"},
		{[]string{"get", "pools,widgets", "--org", "acme"}, "unknown kind \"widgets\""},
		{[]string{"get", "--org", "acme"}, "name a kind"},
		{[]string{"get", "machines", "--at", "2h", "--org", "acme"}, "--at reads objects as they were: name them"},
		{[]string{"get", "machines", "-w", "--at", "2h", "--org", "acme"}, "--watch follows objects as they are now"},
		{[]string{"delete", "pool", "--org", "acme"}, "name the pool to delete"},
		{[]string{"delete", "pool", "w", "--policy", "forced", "--org", "acme"}, "--policy is for machines"},
		{[]string{"describe", "events/1", "--org", "acme"}, "cannot be described"},
		{[]string{"apply", "-f", "x.yaml", "--dry-run=maybe", "--org", "acme"}, "--dry-run \"maybe\": must be none, client or server"},
		{[]string{"apply", "-f", "x.yaml", "--watch", "--org", "acme"}, "pass --apply too"},
		{[]string{"rollout", "status", "ro-1", "--timeout", "-1s", "--org", "acme"}, "--timeout"},
		{[]string{"rollout", "status", "node/x", "--org", "acme"}, "want a rollout id, rollout/<id> or pool/<pool>"},
		{[]string{"create", "token", "--org", "acme"}, `"role" not set`},
		{[]string{"create", "token", "--role", "root", "--org", "acme"}, "must be viewer, operator or admin"},
		{[]string{"boot-url", "tok"}, "no boot server"},
		{[]string{"boot-url", "--boot-server", "http://boot:8081"}, "give an enrollment token, or --new"},
		{[]string{"get", "machines", "--boot-server", "tftp://x", "--org", "acme"}, "boot-server"},
		{[]string{"rollout", "frobnicate"}, `unknown command "frobnicate" for "anvilctl rollout"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "anvilctl"`},
		{[]string{"get", "machines", "--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"config", "use-context", "nope"}, `context "nope" does not exist`},
		{[]string{"get", "machines", "--context", "nope"}, `context "nope" does not exist`},
		{[]string{"get", "machines"}, "no organization"},
		{[]string{"get", "revisions", "--org", "acme"}, "--pool <pool> or --machine <uuid>"},
		{[]string{"get", "events", "x", "--org", "acme"}, "cannot be read one by one"},
		{[]string{"delete", "rollout", "r1", "--org", "acme"}, "cannot be deleted"},
		{[]string{"apply", "--org", "acme"}, "name a file"},
		{[]string{"get", "machine", "u1", "--at", "soon", "--org", "acme"}, "--at"},
		{[]string{"rollout", "status", "x", "-w", "-o", "json", "--org", "acme"}, "--watch writes for people"},
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

// flagsOf is the command line a config test gives: each key of set is a
// flag given with its value (config is the config file's path).
func flagsOf(set map[string]string) flagValues {
	v := flagValues{set: map[string]bool{}}
	for k, val := range set {
		v.set[k] = true
		switch k {
		case "context":
			v.Context = val
		case "server":
			v.Server = val
		case "token":
			v.Token = val
		case "org":
			v.Org = val
		case "config":
			v.ConfigPath = val
		}
	}
	return v
}

// flagsWithConfig is flagsOf with --config path given too.
func flagsWithConfig(path string, set map[string]string) flagValues {
	all := map[string]string{"config": path}
	for k, v := range set {
		all[k] = v
	}
	return flagsOf(all)
}
