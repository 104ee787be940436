// Package service wires the revisions service: its runtime, handlers and ports.
package service

import (
	"context"
	"flag"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/svc"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "revisions"

// Config is the revisions service's configuration.
type Config struct {
	svc.Config
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9102")
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error {
	rt, err := svc.Start(ctx, cfg.Config, events.NewRegistry(), o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))
	rt.Log.Info("started")
	<-ctx.Done()
	return nil
}
