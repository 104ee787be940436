package anvilctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// DefaultServer is the gateway of `make run`.
const DefaultServer = "http://127.0.0.1:8080"

// Config is where anvilctl talks to and as whom.
type Config struct {
	Server string `json:"server,omitempty"`
	Token  string `json:"token,omitempty"`
	Org    string `json:"org,omitempty"`
}

// Environment variables.
const (
	EnvServer = "ANVIL_URL"
	EnvToken  = "ANVIL_TOKEN"
	EnvOrg    = "ANVIL_ORG"
	EnvConfig = "ANVIL_CONFIG"
)

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
func readConfigFile(path string, explicit bool) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("config file: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}

// flagValues are the global flags as given; set says which were given.
type flagValues struct {
	Config
	ConfigPath string
	set        map[string]bool
}

// resolveConfig merges, lowest first: the defaults, the config file, the
// environment, the flags.
func resolveConfig(fv flagValues, getenv func(string) string) (Config, error) {
	path, explicit := fv.ConfigPath, fv.set["config"]
	if !explicit {
		if p := getenv(EnvConfig); p != "" {
			path, explicit = p, true
		} else {
			path = defaultConfigPath(getenv)
		}
	}
	file, err := readConfigFile(path, explicit)
	if err != nil {
		return Config{}, err
	}
	c := Config{Server: DefaultServer}
	layer := func(server, token, org string) {
		if server != "" {
			c.Server = server
		}
		if token != "" {
			c.Token = token
		}
		if org != "" {
			c.Org = org
		}
	}
	layer(file.Server, file.Token, file.Org)
	layer(getenv(EnvServer), getenv(EnvToken), getenv(EnvOrg))
	flag := func(name, v string) string {
		if fv.set[name] {
			return v
		}
		return ""
	}
	layer(flag("server", fv.Server), flag("token", fv.Token), flag("org", fv.Org))
	c.Server = strings.TrimRight(c.Server, "/")
	if !strings.HasPrefix(c.Server, "http://") && !strings.HasPrefix(c.Server, "https://") {
		return Config{}, fmt.Errorf("server %q: must be an http:// or https:// URL", c.Server)
	}
	return c, nil
}
