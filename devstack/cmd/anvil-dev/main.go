// Command anvil-dev runs the whole control plane on one machine with an
// embedded JetStream: what `make run` starts. See docs/operations.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/anvil-fleet/anvil/devstack"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/libs/events/telemetry"
)

func main() {
	var cfg devstack.Config
	var logLevel, logFormat string
	flag.StringVar(&cfg.DataDir, "data-dir", svc.Env("ANVIL_DATA_DIR", ".anvil"), "where JetStream keeps the event log (env ANVIL_DATA_DIR)")
	flag.StringVar(&cfg.GatewayAddr, "gateway-addr", svc.Env("ANVIL_GATEWAY_ADDR", "127.0.0.1:8080"), "gateway HTTP API listen address (env ANVIL_GATEWAY_ADDR)")
	flag.StringVar(&cfg.BootAddr, "boot-addr", svc.Env("ANVIL_BOOT_ADDR", "127.0.0.1:8081"), "boot service listen address for machines (env ANVIL_BOOT_ADDR)")
	flag.StringVar(&cfg.PublicURL, "public-url", svc.Env("ANVIL_BOOT_PUBLIC_URL", ""),
		"the boot service's URL as machines reach it, handed to them in every script and config; empty: http://<boot-addr>, which only this host reaches (env ANVIL_BOOT_PUBLIC_URL)")
	flag.StringVar(&cfg.AssetBaseURL, "asset-base-url", svc.Env("ANVIL_BOOT_ASSET_BASE_URL", ""),
		"where Flatcar's PXE kernel and initrd are (see anvil-boot -h); empty: Flatcar's release servers (env ANVIL_BOOT_ASSET_BASE_URL)")
	flag.StringVar(&cfg.AssetsDir, "assets-dir", svc.Env("ANVIL_BOOT_ASSETS_DIR", ""),
		"the boot service's assets directory: assets/anvil-agent-linux-<arch>, sysext/kubernetes-v<version>-<arch>.raw, flatcar/…; make run sets it to $ANVIL_DATA_DIR/assets, where make assets builds the agent (env ANVIL_BOOT_ASSETS_DIR)")
	flag.StringVar(&cfg.SysextMirror, "sysext-mirror", svc.Env("ANVIL_BOOT_SYSEXT_MIRROR", ""),
		"URL template with {version} and {arch} from which a missing Kubernetes sysext is fetched (env ANVIL_BOOT_SYSEXT_MIRROR)")
	var adminAddr string
	flag.StringVar(&adminAddr, "admin-addr", svc.Env("ANVIL_DEV_ADMIN_ADDR", "127.0.0.1:9109"),
		"admin listener: /metrics of every service (one process, one registry) and the gateway's /healthz and /readyz; empty disables (env ANVIL_DEV_ADMIN_ADDR)")
	flag.StringVar(&cfg.NATSAddr, "nats-addr", svc.Env("ANVIL_DEV_NATS_ADDR", ""), "also accept external NATS clients here, e.g. 127.0.0.1:4222 (env ANVIL_DEV_NATS_ADDR)")
	flag.StringVar(&cfg.KubernetesVersions, "kubernetes-versions", svc.Env("ANVIL_KUBERNETES_VERSIONS", ""),
		"comma-separated x.y.z Kubernetes versions that seed the catalog on the first start; empty: the revisions service's default (env ANVIL_KUBERNETES_VERSIONS)")
	flag.StringVar(&logLevel, "log-level", svc.Env("ANVIL_LOG_LEVEL", "info"), "debug, info, warn or error (env ANVIL_LOG_LEVEL)")
	flag.StringVar(&logFormat, "log-format", svc.Env("ANVIL_LOG_FORMAT", "text"), "json or text (env ANVIL_LOG_FORMAT)")
	flag.Parse()
	if err := svc.CheckConfig(flag.CommandLine, func() error { return svc.CheckLogSettings(logLevel, logFormat) }); err != nil {
		fmt.Fprintf(os.Stderr, "anvil-dev: invalid configuration:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		os.Exit(2)
	}
	if adminAddr != "" {
		cfg.AdminAddrs = map[string]string{"gateway": adminAddr}
	}
	cfg.AdminToken = os.Getenv("ANVIL_ADMIN_TOKEN")
	cfg.EncryptionKeys = os.Getenv("ANVIL_REVISIONS_ENCRYPTION_KEYS")
	cfg.Logger = telemetry.NewLogger("anvil-dev", logLevel, logFormat)
	if w := cfg.PublicURLWarning(); w != "" {
		cfg.Logger.Warn(w)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.SetupTracing(ctx, "anvil-dev")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
	defer shutdown(context.Background())

	st, err := devstack.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "anvil-dev:", err)
		os.Exit(1)
	}
	machinesURL := "http://" + cfg.BootAddr
	if cfg.PublicURL != "" {
		machinesURL = strings.TrimSuffix(cfg.PublicURL, "/")
	}
	fmt.Printf("\nanvil dev stack is up (data in %s)\n  gateway: http://%s\n  boot:    http://%s  (iPXE chain URL: %s/boot.ipxe?token=<enrollment token>)\n",
		cfg.DataDir, cfg.GatewayAddr, cfg.BootAddr, machinesURL)
	assets := cfg.AssetsDir
	if assets == "" {
		assets = "none (set ANVIL_BOOT_ASSETS_DIR, or use make run)"
	}
	fmt.Printf("  assets:  %s\n", assets)
	if adminAddr != "" {
		fmt.Printf("  metrics: http://%s/metrics\n", adminAddr)
	}
	if url := st.NATS.ClientURL(); url != "" {
		fmt.Printf("  nats:    %s\n", url)
	}
	switch {
	case st.AdminToken != "":
		fmt.Printf("\nbootstrap admin token (shown once; only its hash is kept in %s):\n  %s\n", cfg.DataDir, st.AdminToken)
	case cfg.AdminToken != "":
		fmt.Println("\nbootstrap admin token: from ANVIL_ADMIN_TOKEN")
	default:
		fmt.Printf("\nbootstrap admin token: generated on an earlier start (delete %s/admin-token.sha256 to make a new one)\n", cfg.DataDir)
	}
	fmt.Println("\nCtrl-C stops it; the next start continues on the same data.")
	<-ctx.Done()
	fmt.Println("\nstopping…")
	if err := st.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "anvil-dev:", err)
		os.Exit(1)
	}
}
