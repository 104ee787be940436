// Package service wires the gateway: the operators' HTTP API.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/gateway/adapters"
	"github.com/anvil-fleet/anvil/services/gateway/ports"
	"github.com/anvil-fleet/anvil/services/gateway/ui"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "gateway"

// shutdownGrace is how long requests in flight may take once the gateway
// stops.
const shutdownGrace = 10 * time.Second

// DefaultTokenCacheTTL is --token-cache-ttl's default.
const DefaultTokenCacheTTL = 5 * time.Second

// The read cache's defaults (--read-cache-bytes, --read-cache-max-age).
const (
	DefaultReadCacheBytes  = 64 << 20
	DefaultReadCacheMaxAge = 2 * time.Second
)

// Config is the gateway's configuration.
type Config struct {
	svc.Config
	Listen string // --listen / ANVIL_GATEWAY_ADDR
	// AdminTokenHash is the hex SHA-256 of the bootstrap admin token
	// (--admin-token-hash / ANVIL_ADMIN_TOKEN_HASH, or hashed from
	// ANVIL_ADMIN_TOKEN).
	AdminTokenHash string
	BodyLimit      int64         // --body-limit / ANVIL_GATEWAY_BODY_LIMIT
	IdempotencyTTL time.Duration // --idempotency-ttl / ANVIL_GATEWAY_IDEMPOTENCY_TTL
	// TokenCacheTTL is how long a verified API token is trusted without
	// asking the registry again; 0 takes the default (5s), a negative
	// value disables the cache (--token-cache-ttl /
	// ANVIL_GATEWAY_TOKEN_CACHE_TTL).
	TokenCacheTTL time.Duration
	// ConsoleBootURL is the boot service's URL as machines reach it, for
	// the chain URL the console shows (--console-boot-url /
	// ANVIL_CONSOLE_BOOT_URL, else ANVIL_BOOT_PUBLIC_URL); empty: the
	// console says it is not configured.
	ConsoleBootURL string
	// ConsoleSessionTTL is how long a console session lasts
	// (--console-session-ttl / ANVIL_CONSOLE_SESSION_TTL; default 12h).
	ConsoleSessionTTL time.Duration
	// ReadCacheBytes bounds the cache of the registry's machine and
	// machine-page answers; 0 takes the default (64 MiB), negative
	// disables it (--read-cache-bytes / ANVIL_GATEWAY_READ_CACHE_BYTES).
	ReadCacheBytes int
	// ReadCacheMaxAge is the longest a cached answer is served, and so how
	// much older than the registry's a page's last_seen may be; 0 takes
	// the default (2s), negative disables the cache (--read-cache-max-age
	// / ANVIL_GATEWAY_READ_CACHE_MAX_AGE).
	ReadCacheMaxAge time.Duration
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9105")
	fs.StringVar(&c.Listen, "listen", svc.Env("ANVIL_GATEWAY_ADDR", "127.0.0.1:8080"), "HTTP listen address (env ANVIL_GATEWAY_ADDR)")
	fs.StringVar(&c.AdminTokenHash, "admin-token-hash", svc.Env("ANVIL_ADMIN_TOKEN_HASH", hashOf(os.Getenv("ANVIL_ADMIN_TOKEN"))),
		"hex SHA-256 of the bootstrap admin token (env ANVIL_ADMIN_TOKEN_HASH, or ANVIL_ADMIN_TOKEN in plaintext)")
	fs.Int64Var(&c.BodyLimit, "body-limit", int64(svc.EnvInt("ANVIL_GATEWAY_BODY_LIMIT", 1<<20)), "largest request body in bytes; larger gets 413 (env ANVIL_GATEWAY_BODY_LIMIT)")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", svc.EnvDuration("ANVIL_GATEWAY_IDEMPOTENCY_TTL", 24*time.Hour),
		"how long an Idempotency-Key's answer is kept (env ANVIL_GATEWAY_IDEMPOTENCY_TTL)")
	fs.StringVar(&c.ConsoleBootURL, "console-boot-url", svc.Env("ANVIL_CONSOLE_BOOT_URL", os.Getenv("ANVIL_BOOT_PUBLIC_URL")),
		"the boot service's URL as machines reach it, for the iPXE chain URL the console shows (env ANVIL_CONSOLE_BOOT_URL, else ANVIL_BOOT_PUBLIC_URL)")
	fs.DurationVar(&c.ConsoleSessionTTL, "console-session-ttl", svc.EnvDuration(ui.EnvSessionTTL, ui.DefaultSessionTTL),
		"how long a console session lasts (env ANVIL_CONSOLE_SESSION_TTL)")
	fs.DurationVar(&c.TokenCacheTTL, "token-cache-ttl", svc.EnvDuration("ANVIL_GATEWAY_TOKEN_CACHE_TTL", DefaultTokenCacheTTL),
		"how long a verified API token is trusted without asking the registry again; a revocation empties the cache at once; negative disables (env ANVIL_GATEWAY_TOKEN_CACHE_TTL)")
	fs.IntVar(&c.ReadCacheBytes, "read-cache-bytes", svc.EnvInt("ANVIL_GATEWAY_READ_CACHE_BYTES", DefaultReadCacheBytes),
		"bytes of the registry's machine and machine-page answers kept, until the registry says they changed; negative disables (env ANVIL_GATEWAY_READ_CACHE_BYTES)")
	fs.DurationVar(&c.ReadCacheMaxAge, "read-cache-max-age", svc.EnvDuration("ANVIL_GATEWAY_READ_CACHE_MAX_AGE", DefaultReadCacheMaxAge),
		"the longest a kept machine or page answer is served (how much older a page's last_seen may be); negative disables the cache (env ANVIL_GATEWAY_READ_CACHE_MAX_AGE)")
}

// Validate checks the parsed settings; errors name the flag and variable.
func (c *Config) Validate() error {
	var errs []error
	if c.AdminTokenHash != "" && !isSHA256Hex(c.AdminTokenHash) {
		errs = append(errs, fmt.Errorf("--admin-token-hash (env ANVIL_ADMIN_TOKEN_HASH): must be 64 lowercase hex digits, the SHA-256 of the token (as `printf %%s \"$TOKEN\" | sha256sum | cut -d' ' -f1` prints it)"))
	}
	if err := svc.CheckListenAddr(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen (env ANVIL_GATEWAY_ADDR) = %q: %v", c.Listen, err))
	}
	if c.BodyLimit <= 0 {
		errs = append(errs, fmt.Errorf("--body-limit (env ANVIL_GATEWAY_BODY_LIMIT) = %d: must be a positive number of bytes", c.BodyLimit))
	}
	if c.IdempotencyTTL <= 0 {
		errs = append(errs, fmt.Errorf("--idempotency-ttl (env ANVIL_GATEWAY_IDEMPOTENCY_TTL) = %s: must be positive", c.IdempotencyTTL))
	}
	if c.ConsoleSessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("--console-session-ttl (env ANVIL_CONSOLE_SESSION_TTL) = %s: must be positive", c.ConsoleSessionTTL))
	}
	return errors.Join(c.Config.Validate(), errors.Join(errs...))
}

// isSHA256Hex says whether s is a SHA-256 as the gateway compares it: 64
// lowercase hex digits (anything else would never match a token).
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hashOf(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Service is a running gateway, for tests and the dev stack.
type Service struct {
	// Addr is the API listener's actual address.
	Addr string
}

// Hooks adjust a service started by tests and the dev stack.
type Hooks struct {
	// Ready receives the service once it serves.
	Ready chan<- *Service
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error { return Start(ctx, cfg, o, Hooks{}) }

// Start runs the service until ctx ends or its background work fails.
func Start(ctx context.Context, cfg Config, o svc.Options, h Hooks) error {
	if cfg.Service == "" {
		cfg.Service = Name
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.TokenCacheTTL == 0 {
		cfg.TokenCacheTTL = DefaultTokenCacheTTL
	}
	if cfg.ReadCacheBytes == 0 {
		cfg.ReadCacheBytes = DefaultReadCacheBytes
	}
	if cfg.ReadCacheMaxAge == 0 {
		cfg.ReadCacheMaxAge = DefaultReadCacheMaxAge
	}
	rt, err := svc.Start(ctx, cfg.Config, events.NewRegistry(), o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	idem, err := adapters.NewIdempotency(ctx, rt.JS, cfg.StreamReplicas, cfg.IdempotencyTTL)
	if err != nil {
		return err
	}
	api := ports.NewHandler(ports.Deps{
		NC: rt.Conn, Registry: regapi.Client{NC: rt.Conn}, Store: rt.Store, Idempotency: idem,
		AdminTokenHash: cfg.AdminTokenHash, BodyLimit: cfg.BodyLimit, Health: rt.Health, Log: rt.Log,
		TokenCacheTTL:  max(cfg.TokenCacheTTL, 0),
		ReadCacheBytes: max(cfg.ReadCacheBytes, 0), ReadCacheMaxAge: max(cfg.ReadCacheMaxAge, 0),
	})
	console, err := ui.New(ctx, ui.Options{API: api, JS: rt.JS, Replicas: cfg.StreamReplicas, Log: rt.Log,
		BootURL: cfg.ConsoleBootURL, SessionTTL: cfg.ConsoleSessionTTL})
	if err != nil {
		return err
	}
	srv, err := svc.Serve(cfg.Listen, console.Mount(api), rt.Log)
	if err != nil {
		return err
	}
	rt.OnStop(func() {
		// Requests in flight get a while to finish; open streams (an
		// operation's log over SSE) end only with their operation, so they
		// are cut when that while is over.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	})
	// Every route but /version and the console's static pages is a call
	// to one of these: the gateway is ready only while they are.
	rt.DependsOn("registry", "revisions", "rollout")
	rt.Started()
	rt.Log.Info("started", "listen", srv.Addr)
	if h.Ready != nil {
		h.Ready <- &Service{Addr: srv.Addr}
	}
	return rt.Wait(ctx)
}
