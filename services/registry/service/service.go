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
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
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
	// SnapshotEvery: the machine projection stores a snapshot after this
	// many events, and a start restores the newest and replays only what
	// follows (0: projection.DefaultSnapshotEvery; negative: no snapshots).
	// --snapshot-every / ANVIL_REGISTRY_SNAPSHOT_EVERY
	SnapshotEvery int
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
	fs.IntVar(&c.SnapshotEvery, "snapshot-every", svc.EnvInt("ANVIL_REGISTRY_SNAPSHOT_EVERY", projection.DefaultSnapshotEvery),
		"the machine projection stores a snapshot (object store bucket "+projection.SnapshotBucket+") after this many events, "+
			"so that a start replays only the events after the newest; negative: no snapshots (env ANVIL_REGISTRY_SNAPSHOT_EVERY)")
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
	if c.SnapshotEvery == 0 {
		errs = append(errs, errors.New("--snapshot-every (env ANVIL_REGISTRY_SNAPSHOT_EVERY) = 0: must be a number of events, or negative for no snapshots"))
	}
	return errors.Join(c.Config.Validate(), errors.Join(errs...))
}

// Service is a running registry, for tests and the dev stack.
type Service struct {
	App      *app.App
	Machines *projection.Runner
	Orgs     *projection.Runner
}

// Hooks adjust a service started by tests and the dev stack.
type Hooks struct {
	// Ready receives the service once it serves.
	Ready chan<- *Service
	// Now replaces the clock (token expiry, offline detection, the times
	// commands record): tests move a fake one forward instead of sleeping.
	Now func() time.Time
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error { return Start(ctx, cfg, o, Hooks{}) }

// Start runs the service until ctx ends or its background work fails.
func Start(ctx context.Context, cfg Config, o svc.Options, h Hooks) error {
	cfg = cfg.withDefaults()
	if h.Now == nil {
		h.Now = time.Now
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
	// Heartbeats and iPXE boots are written to their buckets off the
	// request path, from the start: handlers only hand them over.
	rt.Go("heartbeat writes", func(ctx context.Context) error { return hb.Run(ctx, rt.Log) })
	rt.Go("iPXE boot writes", func(ctx context.Context) error { return boots.Run(ctx, rt.Log) })
	enroll, err := adapters.NewEnrollment(ctx, rt.JS, cfg.StreamReplicas)
	if err != nil {
		return err
	}
	versions, err := adapters.NewVersions(ctx, rt.JS)
	if err != nil {
		return err
	}
	var snapshots *projection.SnapshotStore
	if cfg.SnapshotEvery >= 0 {
		if snapshots, err = projection.NewSnapshotStore(ctx, rt.JS, cfg.StreamReplicas); err != nil {
			return err
		}
	}
	machines, orgs := readmodel.NewMachineProjection(), readmodel.NewOrgProjection()
	a := &app.App{Store: rt.Store, Machines: machines, Orgs: orgs, Heartbeats: hb, Now: h.Now, Rand: rand.Reader, OfflineAfter: cfg.OfflineAfter,
		IPXEBoots: boots, IPXERecordEvery: cfg.IPXERecordInterval, Versions: versions,
		Enrollment: enroll, EnrollmentRate: cfg.EnrollmentRate, EnrollmentBurst: cfg.EnrollmentBurst}
	s := &Service{
		App: a,
		Machines: projection.NewRunner(projection.Config{Name: "registry-machines", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "machine"}, Snapshots: snapshots, SnapshotEvery: cfg.SnapshotEvery}, rt.JS, rt.Registry, machines, rt.Poison, rt.Log),
		Orgs: projection.NewRunner(projection.Config{Name: "registry-orgs", Instance: cfg.Instance,
			Filter: events.Filter{AggregateType: "org"}}, rt.JS, rt.Registry, orgs, rt.Poison, rt.Log),
	}
	a.WaitMachines = s.Machines.WaitFor
	// Readers that keep the registry's answers (the gateway) hear which
	// machines changed (api.SubjectMachinesChanged).
	notices := adapters.NewMachineChanges(rt.Conn, cfg.Instance, machines.Checkpoint, rt.Log)
	machines.Notify(notices.Note, notices.Replaced)
	rt.Go("change notices", notices.Run)
	defer app.TrackMetrics(a)() // anvil_machines…, read at scrape time

	rt.Project(s.Machines, s.Orgs)
	if !rt.CatchUp(ctx) {
		return rt.Wait(ctx)
	}
	// The watches start once the machines are known: a value for a
	// machine the read model does not hold yet would be dropped.
	rt.Go("heartbeat watch", func(ctx context.Context) error {
		return hb.Watch(ctx, rt.Log, func(org, uuid string, t time.Time) { machines.Model().SetLastSeen(org, uuid, t) })
	})
	rt.Go("iPXE boot watch", func(ctx context.Context) error {
		return boots.Watch(ctx, rt.Log, func(org, uuid string, at, retryBy time.Time) { machines.Model().SetIPXEBoot(org, uuid, at, retryBy) })
	})
	rt.Go("offline sweep", func(ctx context.Context) error {
		tick := time.NewTicker(cfg.SweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				if n := a.SweepConnectivity(ctx, rt.Log); n > 0 {
					rt.Log.Info("machines went offline", "count", n)
				}
			}
		}
	})

	if err := rt.ServeCommands(api.QueueGroup, 128, func(srv *command.Server) error { return ports.Register(srv, a) }); err != nil {
		return err
	}
	if err := rt.ServeReadiness(); err != nil {
		return err
	}
	rt.Started()
	rt.Log.Info("started", "instance", cfg.Instance, "offline_after", cfg.OfflineAfter, "ipxe_record_interval", cfg.IPXERecordInterval,
		"enrollment_rate", cfg.EnrollmentRate, "enrollment_burst", cfg.EnrollmentBurst)
	if h.Ready != nil {
		h.Ready <- s
	}
	return rt.Wait(ctx)
}

// withDefaults fills in what a zero Config (tests, the dev stack) leaves
// unset; the binary's flags set every value.
func (c Config) withDefaults() Config {
	if c.Service == "" {
		c.Service = Name
	}
	if c.OfflineAfter <= 0 {
		c.OfflineAfter = 90 * time.Second
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.Instance == "" {
		c.Instance = svc.InstanceID()
	}
	switch {
	case c.IPXERecordInterval == 0:
		c.IPXERecordInterval = DefaultIPXERecordInterval
	case c.IPXERecordInterval < 0:
		c.IPXERecordInterval = 0 // every boot
	}
	if c.EnrollmentRate == 0 {
		c.EnrollmentRate = DefaultEnrollmentRate
	}
	if c.EnrollmentBurst <= 0 {
		c.EnrollmentBurst = DefaultEnrollmentBurst
	}
	return c
}
