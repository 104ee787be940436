// Package service wires the boot service: its runtime, handlers and ports.
package service

import (
	"context"
	"flag"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "boot"

// Config is the boot service's configuration.
type Config struct {
	svc.Config
	Listen string // --listen / ANVIL_BOOT_ADDR
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "")
	fs.StringVar(&c.Listen, "listen", svc.Env("ANVIL_BOOT_ADDR", "127.0.0.1:8081"), "HTTP listen address (env ANVIL_BOOT_ADDR)")
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
