package service

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/boot/adapters"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
)

// Defaults of the boot service's own settings.
const (
	DefaultListen       = "127.0.0.1:8081"
	DefaultAssetBaseURL = "http://{channel}.release.flatcar-linux.net/amd64-usr/{version}"
	DefaultKernelArgs   = "console=tty0 console=ttyS0,115200n8"
	DefaultBootTokenTTL = time.Hour
	DefaultRetryInitial = 5 * time.Second
	DefaultRetryMax     = 5 * time.Minute
	DefaultCacheBytes   = 64 << 20
	DefaultCacheTTL     = 10 * time.Minute
	DefaultInstrTTL     = time.Hour
	DefaultKnownTTL     = 10 * time.Minute
	DefaultReportEvery  = 10 * time.Second
)

// Config is the boot service's configuration. Zero values take the
// defaults (the dev stack sets only Config and Listen).
type Config struct {
	svc.Config

	// Listen is the plain-HTTP listener: iPXE scripts, health, metrics and,
	// unless TLS is configured, Ignition and the agent API.
	// --listen / ANVIL_BOOT_ADDR.
	Listen string
	// PublicURL is the boot service's base URL as machines reach it, used
	// in every URL a script hands to firmware; empty takes each request's
	// Host header (and scheme). --public-url / ANVIL_BOOT_PUBLIC_URL (the
	// same variable the revisions service reads for the agent's URL).
	PublicURL string

	// TLSListen, TLSCert and TLSKey start a second, HTTPS listener serving
	// everything; then Ignition URLs point at it and the plain listener
	// refuses Ignition and the agent API (see AllowPlainSecrets).
	// --tls-listen / ANVIL_BOOT_TLS_ADDR, --tls-cert / ANVIL_BOOT_TLS_CERT,
	// --tls-key / ANVIL_BOOT_TLS_KEY.
	TLSListen, TLSCert, TLSKey string
	// TLSPublicURL is the HTTPS listener's base URL as machines reach it;
	// empty takes the request's host with TLSListen's port.
	// --tls-public-url / ANVIL_BOOT_TLS_PUBLIC_URL.
	TLSPublicURL string
	// AllowPlainSecrets keeps serving Ignition and the agent API over plain
	// HTTP although TLS is configured (a migration aid).
	// --allow-plain-secrets / ANVIL_BOOT_ALLOW_PLAIN_SECRETS.
	AllowPlainSecrets bool

	// AssetBaseURL is where Flatcar's PXE kernel and initrd are fetched
	// from: a template with {channel} and {version}, or a base under which
	// <channel>/<version>/ is appended; a path starting with "/" (such as
	// /flatcar, with AssetsDir) is on the boot service itself.
	// --asset-base-url / ANVIL_BOOT_ASSET_BASE_URL.
	AssetBaseURL string
	// AssetsDir holds the files machines fetch, served read-only and
	// hashed (see api.ParseAsset for the names): assets/ (the agent
	// binaries), sysext/ (Kubernetes sysext images) and flatcar/ (a local
	// Flatcar mirror). It must exist. --assets-dir / ANVIL_BOOT_ASSETS_DIR.
	AssetsDir string
	// SysextMirror, if set, is where a Kubernetes sysext that AssetsDir
	// lacks is fetched from (once, into AssetsDir/sysext/): a URL template
	// with {version} (x.y.z) and {arch} (x86-64, arm64).
	// --sysext-mirror / ANVIL_BOOT_SYSEXT_MIRROR.
	SysextMirror string
	// KernelArgs are added to Flatcar's kernel command line
	// (space-separated; empty means DefaultKernelArgs). --kernel-args /
	// ANVIL_BOOT_KERNEL_ARGS.
	KernelArgs string

	// SigningKeys sign per-boot tokens and agent credentials:
	// comma-separated base64 keys of at least 32 bytes, the first signs,
	// all verify. Empty uses a key generated once and kept in the KV bucket
	// anvil_boot_keys. --signing-keys / ANVIL_BOOT_SIGNING_KEYS (prefer the
	// variable: flags show in ps).
	SigningKeys string
	// BootTokenTTL is how long a per-boot token is good at /ignition.
	// --boot-token-ttl / ANVIL_BOOT_TOKEN_TTL.
	BootTokenTTL time.Duration
	// RetryInitial and RetryMax bound the delay of iPXE retries (waiting
	// to be assigned, refusals). --ipxe-retry-initial /
	// ANVIL_BOOT_IPXE_RETRY_INITIAL, --ipxe-retry-max /
	// ANVIL_BOOT_IPXE_RETRY_MAX.
	RetryInitial, RetryMax time.Duration
	// IgnitionCacheBytes and IgnitionCacheTTL bound the rendered-Ignition
	// cache. --ignition-cache-bytes / ANVIL_BOOT_IGNITION_CACHE_BYTES,
	// --ignition-cache-ttl / ANVIL_BOOT_IGNITION_CACHE_TTL.
	IgnitionCacheBytes int64
	IgnitionCacheTTL   time.Duration
	// InstructionTTL is how long an instruction without its own expiry
	// waits to be accepted. --instruction-ttl / ANVIL_BOOT_INSTRUCTION_TTL.
	InstructionTTL time.Duration
	// PrepareWorkers render a machine's Ignition into the cache when it is
	// targeted with a revision, ahead of its boot (0 means 1, negative
	// disables). --prepare-workers / ANVIL_BOOT_PREPARE_WORKERS.
	PrepareWorkers int
	// IPXEKnownTTL is how long /ipxe answers a machine that booted before
	// from memory, without asking the registry (0: the default, 10m;
	// negative: always ask).
	// --ipxe-known-ttl / ANVIL_BOOT_IPXE_KNOWN_TTL.
	IPXEKnownTTL time.Duration
	// IPXEReportInterval spaces the reports of boots answered from memory
	// to the registry: at most one per machine per interval, carrying its
	// latest boot. --ipxe-report-interval / ANVIL_BOOT_IPXE_REPORT_INTERVAL.
	IPXEReportInterval time.Duration
	// RecordCacheEntries bounds the boot records kept in memory, kept
	// current by the bucket's watch, which every agent request reads (0:
	// the default, 50,000; negative: read each from the bucket).
	// --record-cache-entries / ANVIL_BOOT_RECORD_CACHE_ENTRIES.
	RecordCacheEntries int
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9104")
	fs.StringVar(&c.Listen, "listen", svc.Env("ANVIL_BOOT_ADDR", DefaultListen),
		"plain HTTP listen address: iPXE, health, metrics, and Ignition and the agent API unless TLS is configured (env ANVIL_BOOT_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", svc.Env("ANVIL_BOOT_PUBLIC_URL", ""),
		"the boot service's base URL as machines reach it; empty uses each request's Host header (env ANVIL_BOOT_PUBLIC_URL)")
	fs.StringVar(&c.TLSListen, "tls-listen", svc.Env("ANVIL_BOOT_TLS_ADDR", ""),
		"HTTPS listen address; needs --tls-cert and --tls-key (env ANVIL_BOOT_TLS_ADDR)")
	fs.StringVar(&c.TLSCert, "tls-cert", svc.Env("ANVIL_BOOT_TLS_CERT", ""), "PEM certificate (chain) of the HTTPS listener (env ANVIL_BOOT_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", svc.Env("ANVIL_BOOT_TLS_KEY", ""), "PEM private key of the HTTPS listener (env ANVIL_BOOT_TLS_KEY)")
	fs.StringVar(&c.TLSPublicURL, "tls-public-url", svc.Env("ANVIL_BOOT_TLS_PUBLIC_URL", ""),
		"the HTTPS listener's base URL as machines reach it; empty uses the request's host and the --tls-listen port (env ANVIL_BOOT_TLS_PUBLIC_URL)")
	fs.BoolVar(&c.AllowPlainSecrets, "allow-plain-secrets", svc.EnvBool("ANVIL_BOOT_ALLOW_PLAIN_SECRETS", false),
		"with TLS configured, still serve Ignition and the agent API over plain HTTP (env ANVIL_BOOT_ALLOW_PLAIN_SECRETS=true)")
	fs.StringVar(&c.AssetBaseURL, "asset-base-url", svc.Env("ANVIL_BOOT_ASSET_BASE_URL", DefaultAssetBaseURL),
		"where Flatcar's PXE kernel and initrd are: a template with {channel} and {version}, or a base to which /<channel>/<version> is appended; a path such as /flatcar is on this boot service (env ANVIL_BOOT_ASSET_BASE_URL)")
	fs.StringVar(&c.AssetsDir, "assets-dir", svc.Env("ANVIL_BOOT_ASSETS_DIR", ""),
		"directory with the files machines fetch, served and hashed: assets/anvil-agent-linux-<amd64|arm64>, sysext/kubernetes-v<x.y.z>-<x86-64|arm64>.raw, flatcar/<channel>/<version>/… (env ANVIL_BOOT_ASSETS_DIR)")
	fs.StringVar(&c.SysextMirror, "sysext-mirror", svc.Env("ANVIL_BOOT_SYSEXT_MIRROR", ""),
		"URL template with {version} and {arch} from which a missing Kubernetes sysext is fetched once into <assets-dir>/sysext/, e.g. https://github.com/flatcar/sysext-bakery/releases/download/kubernetes-v{version}/kubernetes-v{version}-{arch}.raw (env ANVIL_BOOT_SYSEXT_MIRROR)")
	fs.StringVar(&c.KernelArgs, "kernel-args", svc.Env("ANVIL_BOOT_KERNEL_ARGS", DefaultKernelArgs),
		"extra Flatcar kernel arguments, space-separated (env ANVIL_BOOT_KERNEL_ARGS)")
	fs.StringVar(&c.SigningKeys, "signing-keys", svc.Env("ANVIL_BOOT_SIGNING_KEYS", ""),
		"base64 keys (at least 32 bytes each, comma-separated; the first signs) for per-boot tokens and agent credentials; empty uses a generated key kept in JetStream KV anvil_boot_keys. Prefer the env var (env ANVIL_BOOT_SIGNING_KEYS)")
	fs.DurationVar(&c.BootTokenTTL, "boot-token-ttl", svc.EnvDuration("ANVIL_BOOT_TOKEN_TTL", DefaultBootTokenTTL),
		"how long a per-boot token in the Ignition URL is accepted (env ANVIL_BOOT_TOKEN_TTL)")
	fs.DurationVar(&c.RetryInitial, "ipxe-retry-initial", svc.EnvDuration("ANVIL_BOOT_IPXE_RETRY_INITIAL", DefaultRetryInitial),
		"first delay before iPXE asks again (waiting or refused); it doubles per attempt (env ANVIL_BOOT_IPXE_RETRY_INITIAL)")
	fs.DurationVar(&c.RetryMax, "ipxe-retry-max", svc.EnvDuration("ANVIL_BOOT_IPXE_RETRY_MAX", DefaultRetryMax),
		"longest delay before iPXE asks again (env ANVIL_BOOT_IPXE_RETRY_MAX)")
	fs.Int64Var(&c.IgnitionCacheBytes, "ignition-cache-bytes", int64(svc.EnvInt("ANVIL_BOOT_IGNITION_CACHE_BYTES", DefaultCacheBytes)),
		"bound of the rendered-Ignition cache in bytes (env ANVIL_BOOT_IGNITION_CACHE_BYTES)")
	fs.DurationVar(&c.IgnitionCacheTTL, "ignition-cache-ttl", svc.EnvDuration("ANVIL_BOOT_IGNITION_CACHE_TTL", DefaultCacheTTL),
		"how long a rendered Ignition config is reused (env ANVIL_BOOT_IGNITION_CACHE_TTL)")
	fs.IntVar(&c.PrepareWorkers, "prepare-workers", svc.EnvInt("ANVIL_BOOT_PREPARE_WORKERS", 1),
		"workers that render a machine's Ignition ahead of its boot when it is targeted with a revision; -1 disables (env ANVIL_BOOT_PREPARE_WORKERS)")
	fs.DurationVar(&c.IPXEKnownTTL, "ipxe-known-ttl", svc.EnvDuration("ANVIL_BOOT_IPXE_KNOWN_TTL", DefaultKnownTTL),
		"how long /ipxe answers a machine that booted before and did not change since from memory, without asking the registry; negative: always ask (env ANVIL_BOOT_IPXE_KNOWN_TTL)")
	fs.DurationVar(&c.IPXEReportInterval, "ipxe-report-interval", svc.EnvDuration("ANVIL_BOOT_IPXE_REPORT_INTERVAL", DefaultReportEvery),
		"boots answered from memory are reported to the registry afterwards, at most once per machine per interval (env ANVIL_BOOT_IPXE_REPORT_INTERVAL)")
	fs.IntVar(&c.RecordCacheEntries, "record-cache-entries", svc.EnvInt("ANVIL_BOOT_RECORD_CACHE_ENTRIES", adapters.DefaultRecordCacheEntries),
		"boot records kept in memory (about 1 KiB each), which every agent request reads; size it to the fleet; negative: read each from the bucket (env ANVIL_BOOT_RECORD_CACHE_ENTRIES)")
	fs.DurationVar(&c.InstructionTTL, "instruction-ttl", svc.EnvDuration("ANVIL_BOOT_INSTRUCTION_TTL", DefaultInstrTTL),
		"how long an instruction without its own expiry waits to be accepted by the agent (env ANVIL_BOOT_INSTRUCTION_TTL)")
}

// withDefaults fills zero values and checks the configuration; errors name
// the flag and variable.
func (c Config) withDefaults() (Config, error) {
	if c.Service == "" {
		c.Service = Name
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defD := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Listen, DefaultListen)
	def(&c.AssetBaseURL, DefaultAssetBaseURL)
	def(&c.KernelArgs, DefaultKernelArgs)
	defD(&c.BootTokenTTL, DefaultBootTokenTTL)
	defD(&c.RetryInitial, DefaultRetryInitial)
	defD(&c.RetryMax, DefaultRetryMax)
	defD(&c.IgnitionCacheTTL, DefaultCacheTTL)
	defD(&c.InstructionTTL, DefaultInstrTTL)
	if c.IPXEKnownTTL == 0 {
		c.IPXEKnownTTL = DefaultKnownTTL
	}
	defD(&c.IPXEReportInterval, DefaultReportEvery)
	if c.RecordCacheEntries == 0 {
		c.RecordCacheEntries = adapters.DefaultRecordCacheEntries
	}
	if c.PrepareWorkers == 0 {
		c.PrepareWorkers = 1
	}
	if c.IgnitionCacheBytes <= 0 {
		c.IgnitionCacheBytes = DefaultCacheBytes
	}
	var problems []string
	add := func(flag, env string, err error) {
		problems = append(problems, fmt.Sprintf("--%s / %s: %v", flag, env, err))
	}
	if err := svc.CheckListenAddr(c.Listen); err != nil {
		add("listen", "ANVIL_BOOT_ADDR", fmt.Errorf("%q: %v", c.Listen, err))
	}
	if c.TLSListen != "" {
		if err := svc.CheckListenAddr(c.TLSListen); err != nil {
			add("tls-listen", "ANVIL_BOOT_TLS_ADDR", fmt.Errorf("%q: %v", c.TLSListen, err))
		}
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if c.PublicURL != "" {
		if err := ipxe.CheckBaseURL(c.PublicURL); err != nil {
			add("public-url", "ANVIL_BOOT_PUBLIC_URL", err)
		}
	}
	c.TLSPublicURL = strings.TrimSuffix(c.TLSPublicURL, "/")
	if c.TLSPublicURL != "" {
		if err := ipxe.CheckBaseURL(c.TLSPublicURL); err != nil || !strings.HasPrefix(c.TLSPublicURL, "https://") {
			add("tls-public-url", "ANVIL_BOOT_TLS_PUBLIC_URL", errors.New("must be an https URL a script can carry"))
		}
	}
	if (c.TLSListen != "") != (c.TLSCert != "" && c.TLSKey != "") {
		add("tls-listen", "ANVIL_BOOT_TLS_ADDR", errors.New("--tls-listen, --tls-cert and --tls-key go together"))
	}
	if c.TLSListen != "" {
		if _, _, err := net.SplitHostPort(c.TLSListen); err != nil {
			add("tls-listen", "ANVIL_BOOT_TLS_ADDR", err)
		}
	}
	if c.AssetsDir != "" {
		if st, err := os.Stat(c.AssetsDir); err != nil {
			add("assets-dir", "ANVIL_BOOT_ASSETS_DIR", fmt.Errorf("%v (create it, or run `make assets`, which builds the agent into one)", err))
		} else if !st.IsDir() {
			add("assets-dir", "ANVIL_BOOT_ASSETS_DIR", fmt.Errorf("%s is not a directory", c.AssetsDir))
		}
	}
	if c.SysextMirror != "" {
		if err := adapters.CheckMirrorTemplate(c.SysextMirror); err != nil {
			add("sysext-mirror", "ANVIL_BOOT_SYSEXT_MIRROR", err)
		} else if c.AssetsDir == "" {
			add("sysext-mirror", "ANVIL_BOOT_SYSEXT_MIRROR", errors.New("needs --assets-dir / ANVIL_BOOT_ASSETS_DIR, where fetched images are kept"))
		}
	}
	template := c.AssetBaseURL
	if strings.HasPrefix(template, "/") {
		template = "http://boot.example" + template
		if c.AssetsDir == "" {
			add("asset-base-url", "ANVIL_BOOT_ASSET_BASE_URL", fmt.Errorf("%s is a path on this boot service, served from --assets-dir / ANVIL_BOOT_ASSETS_DIR, which is not set", c.AssetBaseURL))
		}
	}
	if err := ipxe.CheckAssetTemplate(template); err != nil {
		add("asset-base-url", "ANVIL_BOOT_ASSET_BASE_URL", err)
	}
	for _, a := range c.kernelArgs() {
		if err := ipxe.CheckKernelArg(a); err != nil {
			add("kernel-args", "ANVIL_BOOT_KERNEL_ARGS", err)
		}
	}
	if c.SigningKeys != "" {
		if _, err := signing.ParseKeys(c.SigningKeys); err != nil {
			add("signing-keys", "ANVIL_BOOT_SIGNING_KEYS", err)
		}
	}
	if c.RetryMax < c.RetryInitial {
		add("ipxe-retry-max", "ANVIL_BOOT_IPXE_RETRY_MAX", errors.New("must not be shorter than --ipxe-retry-initial"))
	}
	if len(problems) > 0 {
		return c, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}

// Validate checks the configuration as Start would, without starting
// anything (the dev stack checks its settings before it starts the
// services). Errors name the flag and the variable.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return errors.Join(c.Config.Validate(), err)
}

func (c Config) kernelArgs() []string { return strings.Fields(c.KernelArgs) }
