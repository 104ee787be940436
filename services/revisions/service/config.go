package service

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "revisions"

// Defaults of the service's own settings.
const (
	DefaultBootURL          = "http://127.0.0.1:8081"
	DefaultRenderCacheBytes = 64 << 20
)

// DefaultKubernetesVersions seed the catalog on the first start when
// --kubernetes-versions is empty: the newest patches, when this list was
// written, of the four minors Kubernetes supported.
var DefaultKubernetesVersions = []string{"1.31.13", "1.32.9", "1.33.5", "1.34.1"}

// Config is the revisions service's configuration. Zero values take the
// defaults, except EncryptionKeys, which is required.
type Config struct {
	svc.Config

	// EncryptionKeys seal and open cluster credentials (the kubeconfig and
	// the bootstrap token): comma-separated "<id>:<base64 of 32 bytes>";
	// the first one seals, all of them open (keep a retired key listed
	// until nothing sealed with it is needed). --encryption-keys /
	// ANVIL_REVISIONS_ENCRYPTION_KEYS (prefer the variable: flags show in
	// ps).
	EncryptionKeys string
	// BootURL is the boot service's public base URL, which machines reach:
	// the agent talks to it, and the agent binary and the Kubernetes
	// sysext images are fetched from under it (the boot service resolves
	// their hashes; see docs/revisions.md). --boot-url /
	// ANVIL_BOOT_PUBLIC_URL.
	BootURL string
	// AgentURL, if set, is where Ignition fetches the agent binary instead
	// of the boot service; AgentHash ("sha512-<hex>" or "sha256-<hex>") is
	// then required, since every remote file is verified. --agent-url /
	// ANVIL_AGENT_URL, --agent-hash / ANVIL_AGENT_HASH.
	AgentURL, AgentHash string
	// removedSysextURL is ANVIL_SYSEXT_URL, which is no longer read: the
	// boot service serves (and, with ANVIL_BOOT_SYSEXT_MIRROR, fetches) the
	// sysext images, hashed. Set, it is refused at start.
	removedSysextURL string
	// KubernetesVersions seeds the catalog on the first start
	// (comma-separated x.y.z; default DefaultKubernetesVersions). Later
	// changes go through the catalog's add_version command.
	// --kubernetes-versions / ANVIL_KUBERNETES_VERSIONS.
	KubernetesVersions string
	// RenderCacheBytes bounds the render cache (default 64 MiB).
	// --render-cache-bytes / ANVIL_REVISIONS_RENDER_CACHE_BYTES.
	RenderCacheBytes int64
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9102")
	c.EncryptionKeys = svc.Env("ANVIL_REVISIONS_ENCRYPTION_KEYS", "")
	fs.Var(hiddenValue{&c.EncryptionKeys}, "encryption-keys",
		"required: keys that seal cluster credentials, comma-separated <id>:<base64 of 32 bytes>; the first seals, all open. Prefer the env var, flags show in ps (env ANVIL_REVISIONS_ENCRYPTION_KEYS)")
	fs.StringVar(&c.BootURL, "boot-url", svc.Env("ANVIL_BOOT_PUBLIC_URL", DefaultBootURL),
		"the boot service's public base URL as machines reach it; the agent, its binary and the sysext images live under it (env ANVIL_BOOT_PUBLIC_URL)")
	fs.StringVar(&c.AgentURL, "agent-url", svc.Env("ANVIL_AGENT_URL", ""),
		"URL of the agent binary elsewhere than the boot service (needs --agent-hash); empty: the boot service serves it, hashed (env ANVIL_AGENT_URL)")
	fs.StringVar(&c.AgentHash, "agent-hash", svc.Env("ANVIL_AGENT_HASH", ""),
		"hash of the binary at --agent-url, which Ignition verifies: sha512-<hex> or sha256-<hex> (env ANVIL_AGENT_HASH)")
	c.removedSysextURL = svc.Env("ANVIL_SYSEXT_URL", "")
	fs.StringVar(&c.KubernetesVersions, "kubernetes-versions", svc.Env("ANVIL_KUBERNETES_VERSIONS", ""),
		"Kubernetes versions (x.y.z, comma-separated) that seed the catalog on the first start; empty means "+strings.Join(DefaultKubernetesVersions, ",")+" (env ANVIL_KUBERNETES_VERSIONS)")
	fs.Int64Var(&c.RenderCacheBytes, "render-cache-bytes", int64(svc.EnvInt("ANVIL_REVISIONS_RENDER_CACHE_BYTES", DefaultRenderCacheBytes)),
		"bound of the rendered-Ignition cache in bytes (env ANVIL_REVISIONS_RENDER_CACHE_BYTES)")
}

// ParseEncryptionKeys reads "<id>:<base64>,<id>:<base64>,…". Errors name
// the position of the bad key, never its material.
func ParseEncryptionKeys(s string) ([]secret.Key, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no encryption key is configured; set ANVIL_REVISIONS_ENCRYPTION_KEYS (or --encryption-keys) to <id>:<base64 of 32 random bytes>, e.g. k1:$(head -c32 /dev/urandom | base64)")
	}
	var keys []secret.Key
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		k, err := secret.ParseKey(part)
		if err != nil {
			// secret's messages never quote the key.
			return nil, fmt.Errorf("key %d of --encryption-keys / ANVIL_REVISIONS_ENCRYPTION_KEYS: %v", i+1, err)
		}
		if seen[k.ID()] {
			return nil, fmt.Errorf("key %d of --encryption-keys / ANVIL_REVISIONS_ENCRYPTION_KEYS: id %q is listed twice", i+1, k.ID())
		}
		seen[k.ID()] = true
		keys = append(keys, k)
	}
	return keys, nil
}

// kubernetesVersions returns the catalog's seed.
func (c Config) kubernetesVersions() ([]string, error) {
	if strings.TrimSpace(c.KubernetesVersions) == "" {
		return DefaultKubernetesVersions, nil
	}
	var out []string
	for _, v := range strings.Split(c.KubernetesVersions, ",") {
		out = append(out, strings.TrimSpace(v))
	}
	if _, err := catalog.New(out...); err != nil {
		return nil, fmt.Errorf("--kubernetes-versions / ANVIL_KUBERNETES_VERSIONS: %v", err)
	}
	return out, nil
}

// renderOptions derives the render options and asset settings from the
// boot service's URL and the agent pin; the URLs and hashes of the files
// the boot service serves are resolved per render. Errors name the flag
// and the variable.
func (c Config) renderOptions() (render.Options, app.AssetSettings, error) {
	base := strings.TrimSuffix(c.BootURL, "/")
	if base == "" {
		base = DefaultBootURL
	}
	// Stand-ins for what is resolved per render, so that Validate checks
	// the rest.
	sample := "sha512-" + strings.Repeat("0", 128)
	o := render.Options{BaseURL: base, AgentURL: base + "/assets/agent", AgentHash: sample, SysextURL: base + "/sysext/k.raw", SysextHash: sample}
	if c.AgentURL != "" {
		o.AgentURL, o.AgentHash = c.AgentURL, c.AgentHash
	}
	var parts []string
	if err := o.Validate(); err != nil {
		flags := map[string]string{
			"base_url": "--boot-url / ANVIL_BOOT_PUBLIC_URL", "agent_url": "--agent-url / ANVIL_AGENT_URL",
			"agent_hash": "--agent-hash / ANVIL_AGENT_HASH",
		}
		for _, f := range errsFields(err) {
			name := flags[f[0]]
			if name == "" {
				name = f[0]
			}
			if f[0] == "agent_hash" && c.AgentHash == "" {
				f[1] = "is required with --agent-url / ANVIL_AGENT_URL: Ignition verifies every file it fetches (sha512-<hex> of the binary, e.g. from sha512sum)"
			}
			parts = append(parts, name+": "+f[1])
		}
	}
	if c.AgentHash != "" && c.AgentURL == "" {
		parts = append(parts, "--agent-hash / ANVIL_AGENT_HASH: only goes with --agent-url / ANVIL_AGENT_URL; the agent the boot service serves is hashed by the boot service")
	}
	if c.removedSysextURL != "" {
		parts = append(parts, "ANVIL_SYSEXT_URL: is no longer read; the boot service serves the Kubernetes sysext images, hashed (set ANVIL_BOOT_SYSEXT_MIRROR on the boot service to have it fetch them from a mirror) — unset it")
	}
	if len(parts) > 0 {
		return render.Options{}, app.AssetSettings{}, errors.New(strings.Join(parts, "; "))
	}
	return render.Options{BaseURL: base}, app.AssetSettings{BootURL: base, AgentURL: c.AgentURL, AgentHash: c.AgentHash}, nil
}

// Validate checks the configuration as Run would, without starting
// anything (the dev stack checks its settings before it starts the
// services). Errors name the flag and the variable.
func (c Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if _, err := ParseEncryptionKeys(c.EncryptionKeys); err != nil {
		return err
	}
	if _, err := c.kubernetesVersions(); err != nil {
		return err
	}
	_, _, err := c.renderOptions()
	return err
}

func (c Config) renderCacheBytes() int64 {
	if c.RenderCacheBytes <= 0 {
		return DefaultRenderCacheBytes
	}
	return c.RenderCacheBytes
}

// hiddenValue is a string flag whose value -h never prints (the default
// may come from the environment and be a key).
type hiddenValue struct{ p *string }

func (v hiddenValue) String() string {
	if v.p == nil || *v.p == "" {
		return ""
	}
	return "[set]"
}

func (v hiddenValue) Set(s string) error {
	*v.p = s
	return nil
}
