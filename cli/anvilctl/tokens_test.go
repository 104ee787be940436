package anvilctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The config file's token goes to the config file's server only: the
// environment or a flag that names another server must bring a token of
// its own, else the command stops and says how to give one.
func TestTokenStaysWithItsServer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(filepath.Join(dir, "lab-token"), []byte("lab-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`current-context: prod
contexts:
- name: prod
  server: https://prod.example
  token: prod-token
  org: acme
- name: lab
  server: http://lab:8080
  token-file: lab-token
  org: lab-org
`)
	fv := func(set map[string]string) flagValues { return flagsWithConfig(path, set) }
	for _, c := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  Config
		// err: the configuration is refused (a *StrandedTokenError) with
		// these words, and want is what is left (no token)
		err []string
	}{
		{"ANVIL_URL without ANVIL_TOKEN", map[string]string{EnvServer: "http://other:8080"}, nil,
			Config{Server: "http://other:8080", Org: "acme", Context: "prod"},
			[]string{"no token for http://other:8080: ANVIL_URL sets that server", `the token of context "prod" is for https://prod.example`,
				"give the token for http://other:8080 with --token or ANVIL_TOKEN", `leave ANVIL_URL out to use context "prod"`}},
		{"ANVIL_URL with ANVIL_TOKEN; the context's organization stays", map[string]string{EnvServer: "http://other:8080", EnvToken: "env-token"}, nil,
			Config{Server: "http://other:8080", Token: "env-token", Org: "acme", Context: "prod"}, nil},
		{"ANVIL_URL with --token", map[string]string{EnvServer: "http://other:8080"}, map[string]string{"token": "flag-token"},
			Config{Server: "http://other:8080", Token: "flag-token", Org: "acme", Context: "prod"}, nil},
		{"ANVIL_URL naming the context's own server", map[string]string{EnvServer: "https://prod.example/"}, nil,
			Config{Server: "https://prod.example", Token: "prod-token", Org: "acme", Context: "prod"}, nil},
		{"--server without --token", nil, map[string]string{"server": "http://other:8080"},
			Config{Server: "http://other:8080", Org: "acme", Context: "prod"},
			[]string{"no token for http://other:8080: --server sets that server", "with --token or ANVIL_TOKEN"}},
		{"--server with ANVIL_TOKEN", map[string]string{EnvToken: "env-token"}, map[string]string{"server": "http://other:8080"},
			Config{Server: "http://other:8080", Token: "env-token", Org: "acme", Context: "prod"}, nil},
		{"--server over --context: its token file is not even read", nil, map[string]string{"context": "lab", "server": "http://other:8080"},
			Config{Server: "http://other:8080", Org: "lab-org", Context: "lab"},
			[]string{`the token of context "lab" is for http://lab:8080`, "with --token, or leave --server out"}},
		{"--server and --token over --context", nil, map[string]string{"context": "lab", "server": "http://other:8080", "token": "t"},
			Config{Server: "http://other:8080", Token: "t", Org: "lab-org", Context: "lab"}, nil},
	} {
		got, err := resolveConfig(fv(c.flags), envOf(c.env))
		var st *StrandedTokenError
		switch {
		case c.err == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != nil && !errors.As(err, &st):
			t.Errorf("%s: error %v, want a token left out", c.name, err)
		case got != c.want:
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		for _, w := range c.err {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want %q", c.name, err, w)
			}
		}
	}

	// a file from before contexts: its token is for its server, or the
	// default one
	write("token: old-token\norg: old\n")
	if _, err := resolveConfig(fv(nil), envOf(map[string]string{EnvServer: "http://other:8080"})); err == nil ||
		!strings.Contains(err.Error(), "the token of the config file "+path+" is for "+DefaultServer) {
		t.Errorf("a top-level token and ANVIL_URL: %v", err)
	}
	if got, err := resolveConfig(fv(nil), envOf(map[string]string{EnvServer: DefaultServer})); err != nil || got.Token != "old-token" {
		t.Errorf("ANVIL_URL naming the default server: %+v %v", got, err)
	}
	// the environment's token goes where the environment or the flags say
	if got, err := resolveConfig(fv(map[string]string{"server": "http://other:8080"}), envOf(map[string]string{EnvToken: "env-token"})); err != nil ||
		got.Token != "env-token" {
		t.Errorf("ANVIL_TOKEN and --server: %+v %v", got, err)
	}

	// through the commands: a request stops before it is made (exit 1);
	// config view and version need no token and go on without it
	write("current-context: prod\ncontexts:\n- name: prod\n  server: https://prod.example\n  token: prod-token-0123456789\n  org: acme\n")
	env := map[string]string{EnvConfig: path, EnvServer: "http://127.0.0.1:1"}
	code, out, errOut := runCLI(t, env, "get", "pools")
	if code != 1 || out != "" || !strings.Contains(errOut, "error: no token for http://127.0.0.1:1: ANVIL_URL sets that server") {
		t.Errorf("get pools with ANVIL_URL: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "config", "view")
	if code != 0 || !strings.Contains(out, "server: http://127.0.0.1:1") || strings.Contains(out, "token:") ||
		!strings.Contains(errOut, "note: no token for http://127.0.0.1:1") {
		t.Errorf("config view with ANVIL_URL: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, env, "version", "--client"); code != 0 || !strings.Contains(out, "Client Version: ") {
		t.Errorf("version --client with ANVIL_URL: %d %q %q", code, out, errOut)
	}
	// (version asking the server: kubectl_e2e_test.go, --server …/nowhere)
}

// -o name would print only kind/<id> of a new token and lose the token,
// which the server shows once: the commands that issue one refuse it
// before they ask the server for anything.
func TestTokenCommandsRefuseOutputName(t *testing.T) {
	env := map[string]string{"HOME": t.TempDir()}
	for _, args := range [][]string{
		{"create", "token", "ci", "--role", "operator", "-o", "name"},
		{"create", "enrollment-token", "rack-1", "--output=name", "--boot-server", "http://boot:8081"},
		{"boot-url", "--new", "rack-2", "-o", "name", "--boot-server", "http://boot:8081"},
	} {
		// nothing listens at the server: the error is the refusal, made
		// before any request
		args = append(args, "--org", "acme", "--server", "http://127.0.0.1:1")
		code, out, errOut := runCLI(t, env, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "error: -o name: ") || !strings.Contains(errOut, "shown only once") ||
			!strings.Contains(errOut, "-o json or -o yaml") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
}
