// Package service wires the gateway service: its runtime, handlers and ports.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "gateway"

// Config is the gateway service's configuration.
type Config struct {
	svc.Config
	Listen string // --listen / ANVIL_GATEWAY_ADDR
	// AdminTokenHash is the hex SHA-256 of the bootstrap admin token
	// (--admin-token-hash / ANVIL_ADMIN_TOKEN_HASH, or hashed from
	// ANVIL_ADMIN_TOKEN).
	AdminTokenHash string
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "")
	fs.StringVar(&c.Listen, "listen", svc.Env("ANVIL_GATEWAY_ADDR", "127.0.0.1:8080"), "HTTP listen address (env ANVIL_GATEWAY_ADDR)")
	fs.StringVar(&c.AdminTokenHash, "admin-token-hash", svc.Env("ANVIL_ADMIN_TOKEN_HASH", hashOf(os.Getenv("ANVIL_ADMIN_TOKEN"))),
		"hex SHA-256 of the bootstrap admin token (env ANVIL_ADMIN_TOKEN_HASH, or ANVIL_ADMIN_TOKEN in plaintext)")
}

func hashOf(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error {
	rt, err := svc.Start(ctx, cfg.Config, events.NewRegistry(), o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	srv, err := svc.Serve(cfg.Listen, rt.Health.Mux(nil), rt.Log)
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.WithoutCancel(ctx))
	rt.Log.Info("started", "listen", cfg.Listen)
	<-ctx.Done()
	return nil
}
