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
	// IPXERecordInterval: an iPXE boot that changes nothing is recorded
	// in the log at most once per interval (0: the default; negative:
	// every boot). --ipxe-record-interval / ANVIL_REGISTRY_IPXE_RECORD_INTERVAL
	IPXERecordInterval time.Duration
	// EnrollmentRate is how many machines one enrollment token may
	// register per second (0: the default; negative: no limit), and
	// EnrollmentBurst how many at once (0: the default).
	// --enrollment-rate / ANVIL_REGISTRY_ENROLLMENT_RATE,
	// --enrollment-burst / ANVIL_REGISTRY_ENROLLMENT_BURST
	EnrollmentRate  float64
	EnrollmentBurst int
	// Now is the service's clock (token expiry, offline detection, the
	// times commands record); nil means time.Now. Not a flag: tests move
	// a fake one forward instead of sleeping.
	Now func() time.Time
}

// Defaults of the settings that a zero Config leaves unset.
const (
	DefaultIPXERecordInterval = time.Hour
	DefaultEnrollmentRate     = 10.0
	DefaultEnrollmentBurst    = 100
)

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9101")
	fs.DurationVar(&c.OfflineAfter, "offline-after", svc.EnvDuration("ANVIL_REGISTRY_OFFLINE_AFTER", 90*time.Second),
		"heartbeat silence after which a machine goes offline (env ANVIL_REGISTRY_OFFLINE_AFTER)")
	fs.DurationVar(&c.SweepInterval, "offline-sweep-interval", svc.EnvDuration("ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL", 10*time.Second),
		"how often silent machines are looked for (env ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL)")
	fs.StringVar(&c.Instance, "instance", svc.Env("ANVIL_INSTANCE", ""),
		"this replica's name, for its projection consumers; defaults to a random ID (env ANVIL_INSTANCE)")
	fs.DurationVar(&c.IPXERecordInterval, "ipxe-record-interval", svc.EnvDuration("ANVIL_REGISTRY_IPXE_RECORD_INTERVAL", DefaultIPXERecordInterval),
		"an iPXE boot that changes nothing (a machine waiting in its boot loop) is recorded in the event log at most once per interval; "+
			"its time is kept in the KV bucket anvil_ipxe_boots meanwhile; negative: record every boot (env ANVIL_REGISTRY_IPXE_RECORD_INTERVAL)")
	fs.Float64Var(&c.EnrollmentRate, "enrollment-rate", svc.EnvFloat("ANVIL_REGISTRY_ENROLLMENT_RATE", DefaultEnrollmentRate),
		"machines one enrollment token may register per second (a token bucket); negative: no limit (env ANVIL_REGISTRY_ENROLLMENT_RATE)")
	fs.IntVar(&c.EnrollmentBurst, "enrollment-burst", svc.EnvInt("ANVIL_REGISTRY_ENROLLMENT_BURST", DefaultEnrollmentBurst),
		"machines one enrollment token may register at once before --enrollment-rate applies (env ANVIL_REGISTRY_ENROLLMENT_BURST)")
}

// Validate checks the parsed settings; errors name the flag and variable.
func (c *Config) Validate() error {
	var errs []error
	if c.OfflineAfter <= 0 {
		errs = append(errs, fmt.Errorf("--offline-after (env ANVIL_REGISTRY_OFFLINE_AFTER) = %s: must be positive", c.OfflineAfter))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("--offline-sweep-interval (env ANVIL_REGISTRY_OFFLINE_SWEEP_INTERVAL) = %s: must be positive", c.SweepInterval))
	}
	if c.EnrollmentBurst < 0 {
		errs = append(errs, fmt.Errorf("--enrollment-burst (env ANVIL_REGISTRY_ENROLLMENT_BURST) = %d: must not be negative", c.EnrollmentBurst))
	}
	return errors.Join(c.Config.Validate(), errors.Join(errs...))
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
	switch {
	case cfg.IPXERecordInterval == 0:
		cfg.IPXERecordInterval = DefaultIPXERecordInterval
	case cfg.IPXERecordInterval < 0:
		cfg.IPXERecordInterval = 0 // every boot
	}
	if cfg.EnrollmentRate == 0 {
		cfg.EnrollmentRate = DefaultEnrollmentRate
	}
	if cfg.EnrollmentBurst <= 0 {
		cfg.EnrollmentBurst = DefaultEnrollmentBurst
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
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
	boots, err := adapters.NewIPXEBoots(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return err
	}
	enroll, err := adapters.NewEnrollment(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return err
	}
	versions, err := adapters.NewVersions(ctx, rt.JS)
	if err != nil {
		return err
	}
	machines, orgs := adapters.NewMachineProjection(), adapters.NewOrgProjection()
	a := &app.App{Store: rt.Store, Machines: machines, Orgs: orgs, Heartbeats: hb, Now: cfg.Now, Rand: rand.Reader, OfflineAfter: cfg.OfflineAfter,
		IPXEBoots: boots, IPXERecordEvery: cfg.IPXERecordInterval, Versions: versions,
		Enrollment: enroll, EnrollmentRate: cfg.EnrollmentRate, EnrollmentBurst: cfg.EnrollmentBurst}
	s := &Service{
		App: a,
		Machines: projection.NewRunner(projection.Config{Name: "registry-machines", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "machine"}}, rt.JS, rt.Registry, machines, rt.Poison, rt.Log),
		Orgs: projection.NewRunner(projection.Config{Name: "registry-orgs", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "org"}}, rt.JS, rt.Registry, orgs, rt.Poison, rt.Log),
	}
	a.WaitMachines = s.Machines.WaitFor
	defer app.TrackMetrics(a)() // anvil_machines…, read at scrape time
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
	for _, r := range []*projection.Runner{s.Machines, s.Orgs} {
		if err := r.WaitLive(ctx); err != nil {
			return err
		}
	}
	// The watches start once the machines are known: a value for a
	// machine the read model does not hold yet would be dropped.
	go func() {
		errc <- hb.Watch(ctx, rt.Log, func(org, uuid string, t time.Time) { machines.Model().SetLastSeen(org, uuid, t) })
	}()
	go func() {
		errc <- boots.Watch(ctx, rt.Log, func(org, uuid string, at, retryBy time.Time) { machines.Model().SetIPXEBoot(org, uuid, at, retryBy) })
	}()

	srv := command.NewServer(rt.Conn, api.QueueGroup, 128, rt.Log)
	if err := ports.Register(srv, a); err != nil {
		return err
	}
	defer srv.Close()
	if err := rt.ServeReadiness(); err != nil {
		return err
	}
	rt.Started()
	rt.Log.Info("started", "instance", cfg.Instance, "offline_after", cfg.OfflineAfter, "ipxe_record_interval", cfg.IPXERecordInterval,
		"enrollment_rate", cfg.EnrollmentRate, "enrollment_burst", cfg.EnrollmentBurst)
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
