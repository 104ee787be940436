// Package service wires the registry service: organizations, tokens and the
// machine inventory.
package service

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/registry/adapters"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app"
	"github.com/anvil-fleet/anvil/services/registry/ports"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "registry"

// Config is the registry's configuration.
type Config struct {
	svc.Config
	OfflineAfter  time.Duration // --offline-after / ANVIL_REGISTRY_OFFLINE_AFTER
	SweepInterval time.Duration // --offline-sweep-interval / ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL
	Instance      string        // --instance / ANVIL_INSTANCE (defaults to a random ID)
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9101")
	fs.DurationVar(&c.OfflineAfter, "offline-after", envDuration("ANVIL_REGISTRY_OFFLINE_AFTER", 90*time.Second),
		"heartbeat silence after which a machine goes offline (env ANVIL_REGISTRY_OFFLINE_AFTER)")
	fs.DurationVar(&c.SweepInterval, "offline-sweep-interval", envDuration("ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL", 10*time.Second),
		"how often silent machines are looked for (env ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL)")
	fs.StringVar(&c.Instance, "instance", svc.Env("ANVIL_INSTANCE", ""),
		"this replica's name, for its projection consumers; defaults to a random ID (env ANVIL_INSTANCE)")
}

func envDuration(name string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(svc.Env(name, def.String()))
	if err != nil {
		return def
	}
	return d
}

// Service is a running registry, for tests and the dev stack.
type Service struct {
	App      *app.App
	Machines *projection.Runner
	Orgs     *projection.Runner
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error {
	return Start(ctx, cfg, o, nil)
}

// Start runs the service until ctx ends; ready, if not nil, receives the
// service once its projections have caught up.
func Start(ctx context.Context, cfg Config, o svc.Options, ready chan<- *Service) error {
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 90 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.Instance == "" {
		cfg.Instance = randomID()
	}
	rt, err := svc.Start(ctx, cfg.Config, app.Registry(), o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))

	hb, err := adapters.NewHeartbeats(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return err
	}
	machines, orgs := adapters.NewMachineProjection(), adapters.NewOrgProjection()
	a := &app.App{Store: rt.Store, Machines: machines, Orgs: orgs, Heartbeats: hb, Now: time.Now, Rand: rand.Reader, OfflineAfter: cfg.OfflineAfter}
	s := &Service{
		App: a,
		Machines: projection.NewRunner(projection.Config{Name: "registry-machines", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "machine"}}, rt.JS, rt.Registry, machines, rt.Poison, rt.Log),
		Orgs: projection.NewRunner(projection.Config{Name: "registry-orgs", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "org"}}, rt.JS, rt.Registry, orgs, rt.Poison, rt.Log),
	}
	a.WaitMachines = s.Machines.WaitFor
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	for _, r := range []*projection.Runner{s.Machines, s.Orgs} {
		go func() { errc <- r.Run(ctx) }()
		rt.Health.Add("projection "+r.Name(), func(context.Context) error {
			if !r.Live() {
				return errors.New("catching up with the event log")
			}
			return nil
		})
	}
	go func() {
		errc <- hb.Watch(ctx, rt.Log, func(org, uuid string, t time.Time) { machines.Model().SetLastSeen(org, uuid, t) })
	}()
	for _, r := range []*projection.Runner{s.Machines, s.Orgs} {
		if err := r.WaitLive(ctx); err != nil {
			return err
		}
	}

	srv := command.NewServer(rt.Conn, api.QueueGroup, 128, rt.Log)
	if err := ports.Register(srv, a); err != nil {
		return err
	}
	defer srv.Close()
	rt.Log.Info("started", "instance", cfg.Instance, "offline_after", cfg.OfflineAfter)
	if ready != nil {
		ready <- s
	}

	tick := time.NewTicker(cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-tick.C:
			if n := a.SweepConnectivity(ctx, rt.Log); n > 0 {
				rt.Log.Info("machines went offline", "count", n)
			}
		}
	}
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
