package anvilctl

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// DefaultServer is the gateway of `make run`.
const DefaultServer = "http://127.0.0.1:8080"

// Config is where anvilctl talks to and as whom: the settings in effect.
type Config struct {
	Server string `json:"server,omitempty"`
	Token  string `json:"token,omitempty"`
	Org    string `json:"org,omitempty"`
	// BootServer is the boot service's URL as machines reach it, for the
	// iPXE chain URL (boot-url, create enrollment-token).
	BootServer string `json:"boot-server,omitempty"`
	// Context is the context the settings come from, if any.
	Context string `json:"context,omitempty"`
}

// Environment variables.
const (
	EnvServer     = "ANVIL_URL"
	EnvToken      = "ANVIL_TOKEN"
	EnvOrg        = "ANVIL_ORG"
	EnvConfig     = "ANVIL_CONFIG"
	EnvBootServer = "ANVIL_BOOT_URL"
)

// Context is one control plane in the config file: where, as whom, in
// which organization.
type Context struct {
	Name   string `json:"name"`
	Server string `json:"server,omitempty"`
	Token  string `json:"token,omitempty"`
	// TokenFile names a file holding the token (read at each use; a
	// relative path is relative to the config file's directory).
	TokenFile  string `json:"token-file,omitempty"`
	Org        string `json:"org,omitempty"`
	BootServer string `json:"boot-server,omitempty"`
}

// File is the config file. A file written before contexts existed has only
// server, token and org at the top level; it is still read, as the
// settings in effect while no context is selected.
type File struct {
	Server         string    `json:"server,omitempty"`
	Token          string    `json:"token,omitempty"`
	Org            string    `json:"org,omitempty"`
	CurrentContext string    `json:"current-context,omitempty"`
	Contexts       []Context `json:"contexts,omitempty"`
}

// context finds a context by name.
func (f *File) context(name string) *Context {
	for i := range f.Contexts {
		if f.Contexts[i].Name == name {
			return &f.Contexts[i]
		}
	}
	return nil
}

func (f *File) contextNames() []string {
	var out []string
	for _, c := range f.Contexts {
		out = append(out, c.Name)
	}
	return out
}

// defaultConfigPath is $XDG_CONFIG_HOME/anvil/config.yaml, or
// ~/.config/anvil/config.yaml.
func defaultConfigPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "anvil", "config.yaml")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".config", "anvil", "config.yaml")
}

// readConfigFile reads a config file; a missing file is an empty config
// unless it was named explicitly.
func readConfigFile(path string, explicit bool) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("config file: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return f, fmt.Errorf("config file %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, c := range f.Contexts {
		switch {
		case c.Name == "":
			return f, fmt.Errorf("config file %s: contexts[%d]: no name", path, i)
		case seen[c.Name]:
			return f, fmt.Errorf("config file %s: context %q is defined twice", path, c.Name)
		}
		seen[c.Name] = true
	}
	return f, nil
}

// writeConfigFile writes the file atomically, readable by its owner only
// (it holds tokens).
func writeConfigFile(path string, f File) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("config file: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("config file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	return nil
}

// flagValues are the global flags as given; set says which were given.
type flagValues struct {
	Config
	ConfigPath string
	set        map[string]bool
}

// configPath is the config file's path and whether it was named (then it
// must exist): --config, else $ANVIL_CONFIG, else the default.
func configPath(fv flagValues, getenv func(string) string) (string, bool) {
	if fv.set["config"] {
		return fv.ConfigPath, true
	}
	if p := getenv(EnvConfig); p != "" {
		return p, true
	}
	return defaultConfigPath(getenv), false
}

// settings is one layer of configuration; the later layer wins for each
// setting it sets. origin names the layer in errors; file says it comes
// from the config file (a context or the file's top level).
type settings struct {
	server, token, tokenFile, org, boot string
	origin                              string
	file                                bool
}

// StrandedTokenError says the config file's token was left out: a higher
// layer (the environment or a flag) points anvilctl at another server than
// the one the token is for, and gave no token of its own. A token is only
// ever sent to the server of its own layer.
type StrandedTokenError struct {
	Server, ServerFrom string // the server in effect and what set it
	TokenFrom          string // where the token left out comes from
	TokenServer        string // the server it was for
	TokenFlagFrom      string // where a token for Server could be given
}

func (e *StrandedTokenError) Error() string {
	return fmt.Sprintf("no token for %s: %s sets that server, and the token of %s is for %s, so it is not sent there; "+
		"give the token for %s with %s, or leave %s out to use %s",
		e.Server, e.ServerFrom, e.TokenFrom, e.TokenServer, e.Server, e.TokenFlagFrom, e.ServerFrom, e.TokenFrom)
}

// resolveConfig merges, lowest first: the defaults; the current context
// (or, without one, a file's top-level settings); the environment; the
// flags. A context named with --context is the whole choice: it replaces
// the environment's settings, and only the flags override it.
//
// The config file's token goes with the config file's server: when the
// environment or a flag sets another server and no token of its own (nor
// a flag's), the file's token is left out and the error is a
// *StrandedTokenError, with the configuration (without a token) still
// answered for the commands that need none.
func resolveConfig(fv flagValues, getenv func(string) string) (Config, error) {
	path, explicit := configPath(fv, getenv)
	file, err := readConfigFile(path, explicit)
	if err != nil {
		return Config{}, err
	}
	c := Config{Server: DefaultServer}
	tokenFile := ""
	// where the server and the token come from, and the server the
	// token was given for
	serverFrom, tokenFrom, tokenServer := "", "", DefaultServer
	tokenFromFile := false
	layer := func(s settings) {
		if s.server != "" {
			c.Server, serverFrom = s.server, s.origin
		}
		if s.token != "" {
			c.Token, tokenFile = s.token, ""
		}
		if s.tokenFile != "" {
			c.Token, tokenFile = "", s.tokenFile
		}
		if s.token != "" || s.tokenFile != "" {
			tokenFrom, tokenFromFile, tokenServer = s.origin, s.file, c.Server
		}
		if s.org != "" {
			c.Org = s.org
		}
		if s.boot != "" {
			c.BootServer = s.boot
		}
	}
	ctxLayer := func(name, origin string) error {
		k := file.context(name)
		if k == nil {
			if len(file.Contexts) == 0 {
				return fmt.Errorf("%s: context %q does not exist: %s has no contexts (add one with anvilctl config set-context)", origin, name, path)
			}
			return fmt.Errorf("%s: context %q does not exist in %s: one of %s", origin, name, path, strings.Join(file.contextNames(), ", "))
		}
		tf := k.TokenFile
		if tf != "" && !filepath.IsAbs(tf) {
			tf = filepath.Join(filepath.Dir(path), tf)
		}
		layer(settings{server: k.Server, token: k.Token, tokenFile: tf, org: k.Org, boot: k.BootServer,
			origin: fmt.Sprintf("context %q", name), file: true})
		c.Context = name
		return nil
	}
	env := settings{server: getenv(EnvServer), token: getenv(EnvToken), org: getenv(EnvOrg), boot: getenv(EnvBootServer), origin: EnvServer}
	envTokenToo := true // ANVIL_TOKEN can give the token for ANVIL_URL
	switch {
	case fv.set["context"]:
		if err := ctxLayer(fv.Context, "--context"); err != nil {
			return Config{}, err
		}
		envTokenToo = false
	case file.CurrentContext != "":
		if err := ctxLayer(file.CurrentContext, "current-context"); err != nil {
			return Config{}, err
		}
		layer(env)
	default:
		layer(settings{server: file.Server, token: file.Token, org: file.Org, origin: "the config file " + path, file: true})
		layer(env)
	}
	flag := func(name, v string) string {
		if fv.set[name] {
			return v
		}
		return ""
	}
	layer(settings{server: flag("server", fv.Server), token: flag("token", fv.Token), org: flag("org", fv.Org), boot: flag("boot-server", fv.BootServer),
		origin: "--server"})
	c.Server = strings.TrimRight(c.Server, "/")
	var stranded error
	if tokenFromFile && c.Server != strings.TrimRight(tokenServer, "/") {
		// the environment or a flag moved the server away from the
		// file's token
		give := "--token"
		if envTokenToo {
			give += " or " + EnvToken
		}
		stranded = &StrandedTokenError{Server: c.Server, ServerFrom: serverFrom, TokenFrom: tokenFrom,
			TokenServer: strings.TrimRight(tokenServer, "/"), TokenFlagFrom: give}
		c.Token, tokenFile = "", ""
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return Config{}, fmt.Errorf("context %s: token-file: %w", c.Context, err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	if err := checkHTTPURL(c.Server); err != nil {
		return Config{}, fmt.Errorf("server %w", err)
	}
	c.BootServer = strings.TrimRight(c.BootServer, "/")
	if c.BootServer != "" {
		if err := checkHTTPURL(c.BootServer); err != nil {
			return Config{}, fmt.Errorf("boot-server %w", err)
		}
	}
	return c, stranded
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: must be an http:// or https:// URL", s)
	}
	return nil
}

// maskToken shows a token's first and last four characters.
func maskToken(t string) string {
	if len(t) > 8 {
		return t[:4] + "…" + t[len(t)-4:]
	}
	if t != "" {
		return "…"
	}
	return ""
}
