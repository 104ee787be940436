// Package service wires the boot service: its runtime, KV stores, clients,
// event handlers, NATS queries and HTTP listeners.
package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/boot/adapters"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	"github.com/anvil-fleet/anvil/services/boot/ports"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "boot"

// NewRegistry returns a registry of every payload type the service reads.
func NewRegistry() *events.Registry {
	reg := events.NewRegistry()
	reg.RegisterAll(api.EventTypes())
	reg.RegisterAll(app.RevokingEvents()) // the registry's, read to revoke credentials
	return reg
}

// Service is a running boot service, for tests and benchmarks.
type Service struct {
	App *app.App
	// Addr and TLSAddr are the listeners' actual addresses (TLSAddr is
	// empty without TLS).
	Addr, TLSAddr string
	// Cache is the rendered-Ignition cache (nil when Hooks replaced it).
	Cache *adapters.IgnitionCache
	// Preparer renders Ignition ahead of boots (nil when disabled).
	Preparer *app.Preparer
	// Assets is the index of the assets directory.
	Assets *adapters.AssetIndex
}

// prepareQueue bounds the machines waiting to be rendered ahead.
const prepareQueue = 1 << 16

// prepareOn are the machine events after which a machine's next boot needs
// a render: it was targeted, or renamed or relabelled.
var prepareOn = []string{"machine.target_revision_set", "machine.hostname_changed", "machine.labels_changed"}

// Hooks adjust a service started by tests and benchmarks.
type Hooks struct {
	// Ready receives the service once it serves.
	Ready chan<- *Service
	// Renderer replaces the cached revisions-backed renderer (a benchmark
	// baseline renders on every request).
	Renderer app.IgnitionSource
	// Now replaces the clock.
	Now func() time.Time
	// Listeners are served plain HTTP as well as cfg.Listen: an
	// in-memory listener for a simulated fleet in the same process
	// (sim.MemNetwork), which would otherwise hold two file descriptors
	// per connection.
	Listeners []net.Listener
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error {
	return Start(ctx, cfg, o, Hooks{})
}

// Start runs the service until ctx ends or its background work fails.
func Start(ctx context.Context, cfg Config, o svc.Options, h Hooks) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	rt, err := svc.Start(ctx, cfg.Config, NewRegistry(), o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	log := rt.Log

	keys, err := signingKeys(ctx, cfg, rt, log)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	records, err := adapters.NewRecords(ctx, rt.JS, cfg.StreamReplicas, max(cfg.RecordCacheEntries, 0))
	if err != nil {
		return err
	}
	startupLogs, err := adapters.NewStartupLogs(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return err
	}
	revisions := adapters.NewRevisions(rt.Conn)
	rt.Go("boot records watch", func(ctx context.Context) error { records.Watch(ctx, log); return nil })

	s := &Service{}
	renderer := h.Renderer
	if renderer == nil {
		s.Cache = adapters.NewIgnitionCache(revisions.Render, cfg.IgnitionCacheBytes, cfg.IgnitionCacheTTL)
		defer s.Cache.Close()
		rt.Go("cluster changes", func(ctx context.Context) error { s.Cache.WatchClusters(ctx, rt.JS, log); return nil })
		renderer = s.Cache
	}
	s.Assets = newAssetIndex(cfg, log, func(name string) {
		// A file changed in place: configs rendered with its old hash
		// would fail Ignition's verification, so none is served again.
		if s.Cache != nil {
			s.Cache.InvalidateAll()
		}
	})
	a := &app.App{
		Registry: adapters.NewRegistry(rt.Conn), Revisions: revisions, Renderer: renderer,
		Records: records, StartupLogs: startupLogs, Keys: keys, Log: log, Now: h.Now,
		Settings: app.Settings{
			PublicURL: cfg.PublicURL, AssetsDir: cfg.AssetsDir,
			AssetBaseURL: cfg.AssetBaseURL, KernelArgs: cfg.kernelArgs(), BootTokenTTL: cfg.BootTokenTTL,
			RetryInitial: cfg.RetryInitial, RetryMax: cfg.RetryMax, InstructionTTL: cfg.InstructionTTL,
		},
	}
	if cfg.AssetsDir != "" {
		a.Assets = s.Assets
		rt.Go("assets index", func(ctx context.Context) error { return indexAssets(ctx, s.Assets, cfg, log) })
	} else {
		log.Warn("no --assets-dir / ANVIL_BOOT_ASSETS_DIR: this boot service serves no agent binary and no Kubernetes sysext and does not answer cmd.boot.assets.resolve, so no pool revision can be saved unless another replica has them; `make assets` builds the agent (see docs/boot.md)")
	}
	if cfg.IPXEKnownTTL > 0 {
		a.Known = app.NewKnownMachines(cfg.IPXEKnownTTL, cfg.IPXEReportInterval)
		now := h.Now
		if now == nil {
			now = time.Now
		}
		rt.Go("iPXE boot reports", func(ctx context.Context) error { a.Known.Run(ctx, a.Registry, now, log); return nil })
		rt.Go("known machines", func(ctx context.Context) error { adapters.FollowKnownMachines(ctx, rt.JS, a.Known, log); return nil })
	}
	a.LastIgnitions = app.NewLastIgnitions()
	rt.Go("Last Ignition records", func(ctx context.Context) error { a.LastIgnitions.Run(ctx, a); return nil })
	a.Defaults()
	s.App = a
	if cfg.PrepareWorkers > 0 {
		s.Preparer = app.NewPreparer(a, prepareQueue)
		rt.Go("Ignition preparer", func(ctx context.Context) error { s.Preparer.Run(ctx, cfg.PrepareWorkers); return nil })
		rt.Go("machine changes", func(ctx context.Context) error {
			adapters.FollowMachineEvents(ctx, rt.JS, prepareOn, s.Preparer.Enqueue, log)
			return nil
		})
	}

	router, err := handler.NewRouter(rt.JS, rt.Registry, rt.Poison, log, handler.Options{})
	if err != nil {
		return err
	}
	ports.RegisterEventHandlers(router, a)
	rt.HandleEvents(router)
	if !rt.CatchUp(ctx) {
		return rt.Wait(ctx)
	}

	if err := rt.ServeCommands(api.QueueGroup, 64, func(srv *command.Server) error { return ports.RegisterQueries(srv, a) }); err != nil {
		return err
	}
	// Long polls end when the service stops, not when their wait runs out.
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	plainLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("%s: listening on %s: %w", Name, cfg.Listen, err)
	}
	s.Addr = plainLn.Addr().String()
	var tlsLn net.Listener
	tlsPort := ""
	if cfg.TLSListen != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			_ = plainLn.Close()
			return fmt.Errorf("%s: --tls-cert / --tls-key: %w", Name, err)
		}
		ln, err := net.Listen("tcp", cfg.TLSListen)
		if err != nil {
			_ = plainLn.Close()
			return fmt.Errorf("%s: listening on %s: %w", Name, cfg.TLSListen, err)
		}
		s.TLSAddr = ln.Addr().String()
		_, tlsPort, _ = net.SplitHostPort(s.TLSAddr)
		tlsLn = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	opts := ports.HTTPOptions{
		PublicURL: cfg.PublicURL, TLSConfigured: tlsLn != nil, TLSPublicURL: cfg.TLSPublicURL, TLSPort: tlsPort,
		PlainSecrets: cfg.AllowPlainSecrets, Health: rt.Health, Log: log,
	}
	plain := ports.NewHTTP(a, opts)
	servers := []*http.Server{serve(reqCtx, plainLn, plain, log)}
	for _, ln := range h.Listeners {
		servers = append(servers, serve(reqCtx, ln, plain, log))
	}
	if tlsLn != nil {
		tlsOpts := opts
		tlsOpts.TLS = true
		servers = append(servers, serve(reqCtx, tlsLn, ports.NewHTTP(a, tlsOpts), log))
	} else {
		log.Warn("no TLS configured: Ignition (with the cluster's join token and the agent credential) and the agent API are served over plain HTTP; see docs/boot.md")
	}
	rt.OnStop(func() { shutdown(servers, stopRequests) })
	// Boot answers firmware and agents with what the registry and the
	// revisions service know: it is ready only while they are.
	rt.DependsOn("registry", "revisions")
	if err := rt.ServeReadiness(); err != nil {
		return err
	}
	rt.Started()
	log.Info("started", "listen", s.Addr, "tls_listen", s.TLSAddr, "public_url", cfg.PublicURL, "asset_base_url", cfg.AssetBaseURL,
		"assets_dir", cfg.AssetsDir, "sysext_mirror", cfg.SysextMirror)
	if h.Ready != nil {
		h.Ready <- s
	}
	return rt.Wait(ctx)
}

// signingKeys returns the configured keys, or the generated one.
func signingKeys(ctx context.Context, cfg Config, rt *svc.Runtime, log *slog.Logger) (signing.Keys, error) {
	if cfg.SigningKeys != "" {
		return signing.ParseKeys(cfg.SigningKeys)
	}
	key, created, err := adapters.GeneratedSigningKey(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return signing.Keys{}, err
	}
	if created {
		log.Warn("no --signing-keys configured: generated a signing key and stored it in JetStream KV " + adapters.KeysBucket + "; set ANVIL_BOOT_SIGNING_KEYS in production")
	}
	return signing.NewKeys(key)
}

// serve serves h on ln until Shutdown.
func serve(base context.Context, ln net.Listener, h http.Handler, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return srv
}

func shutdown(servers []*http.Server, stopRequests context.CancelFunc) {
	stopRequests() // ends long polls
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}

// assetRescan is how often the assets directory is rescanned for files
// replaced in place (a rescan is a stat per file; only changed files are
// hashed again).
const assetRescan = 30 * time.Second

func newAssetIndex(cfg Config, log *slog.Logger, onChange func(string)) *adapters.AssetIndex {
	var mirror *adapters.SysextMirror
	if cfg.SysextMirror != "" {
		mirror = &adapters.SysextMirror{
			Template: cfg.SysextMirror, Dir: filepath.Join(cfg.AssetsDir, api.SysextDir), Log: log,
			Client: &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)},
		}
	}
	return adapters.NewAssetIndex(cfg.AssetsDir, mirror, log, onChange)
}

// indexAssets hashes what the assets directory holds, says what machines
// will find (and what they will not), then rescans it now and then.
// A first scan that fails stops the service (it would serve no asset and
// never look again) rather than leave it ready.
func indexAssets(ctx context.Context, x *adapters.AssetIndex, cfg Config, log *slog.Logger) error {
	found, ignored, err := x.Scan(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("indexing the assets directory %s: %w", cfg.AssetsDir, err)
	}
	var agents, sysexts []string
	flatcar := 0
	for _, f := range found {
		ref, _ := api.ParseAsset(f.Name)
		switch ref.Kind {
		case api.KindAgent:
			agents = append(agents, ref.GoArch)
		case api.KindSysext:
			sysexts = append(sysexts, ref.Version+"/"+ref.Arch)
		default:
			flatcar++
		}
	}
	log.Info("assets indexed", "dir", cfg.AssetsDir, "agents", agents, "sysexts", sysexts, "flatcar_files", flatcar)
	if len(ignored) > 0 {
		log.Warn("files in the assets directory that are no asset (not served)", "files", ignored)
	}
	if !slices.Contains(agents, "amd64") {
		name, _ := api.AgentAsset("amd64")
		log.Warn("the assets directory has no agent binary for amd64: no pool revision can be saved until it does; run `make assets` or put anvil-agent there",
			"want", filepath.Join(cfg.AssetsDir, name))
	}
	if len(sysexts) == 0 && cfg.SysextMirror == "" {
		log.Warn("the assets directory has no Kubernetes sysext and no --sysext-mirror / ANVIL_BOOT_SYSEXT_MIRROR is set: saving a pool revision is refused until the sysext of its version is there (make sysext KUBERNETES_VERSION=x.y.z, or set ANVIL_BOOT_SYSEXT_MIRROR)",
			"want", filepath.Join(cfg.AssetsDir, api.SysextDir, "kubernetes-v<x.y.z>-x86-64.raw"))
	}
	x.Watch(ctx, assetRescan)
	return nil
}
