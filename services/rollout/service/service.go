// Package service wires the rollout service: its runtime, the rollouts'
// projection, the drivers under their leases, the event handlers and the
// NATS subjects.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/adapters"
	"github.com/anvil-fleet/anvil/services/rollout/api"
	"github.com/anvil-fleet/anvil/services/rollout/app"
	"github.com/anvil-fleet/anvil/services/rollout/domain/machineop"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
	"github.com/anvil-fleet/anvil/services/rollout/ports"
	"github.com/anvil-fleet/anvil/services/rollout/readmodel"
)

// Name is the service's name in logs, metrics and NATS queue groups.
const Name = "rollout"

// Config is the rollout service's configuration.
type Config struct {
	svc.Config
	Instance string        // --instance / ANVIL_INSTANCE
	LeaseTTL time.Duration // --lease-ttl / ANVIL_ROLLOUT_LEASE_TTL
	Poll     time.Duration // --poll / ANVIL_ROLLOUT_POLL
	Replan   time.Duration // --replan / ANVIL_ROLLOUT_REPLAN
	// RemediationMaxInFlight: --remediation-max-in-flight /
	// ANVIL_ROLLOUT_REMEDIATION_MAX_IN_FLIGHT; a pool's
	// rollout.remediation overrides it.
	RemediationMaxInFlight int
	// KubeQPS and KubeBurst: --kube-qps / ANVIL_ROLLOUT_KUBE_QPS and
	// --kube-burst / ANVIL_ROLLOUT_KUBE_BURST.
	KubeQPS   float64
	KubeBurst int
}

// RegisterFlags binds the service's flags, each with an environment default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs, Name, "127.0.0.1:9103")
	fs.StringVar(&c.Instance, "instance", svc.Env("ANVIL_INSTANCE", ""),
		"this replica's name, for its projection consumer and its rollout leases; default a random id (env ANVIL_INSTANCE)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", svc.EnvDuration("ANVIL_ROLLOUT_LEASE_TTL", 15*time.Second),
		"how long a rollout lease lasts without renewal; another replica takes over a dead one's rollouts after it (env ANVIL_ROLLOUT_LEASE_TTL)")
	fs.DurationVar(&c.Poll, "poll", svc.EnvDuration("ANVIL_ROLLOUT_POLL", 2*time.Second),
		"how often a waiting step looks again when no change notification came (env ANVIL_ROLLOUT_POLL)")
	fs.DurationVar(&c.Replan, "replan", svc.EnvDuration("ANVIL_ROLLOUT_REPLAN", 30*time.Second),
		"safety-net interval at which each rollout is planned again without any event, its log read again if it was not meanwhile (env ANVIL_ROLLOUT_REPLAN)")
	fs.IntVar(&c.RemediationMaxInFlight, "remediation-max-in-flight", svc.EnvInt("ANVIL_ROLLOUT_REMEDIATION_MAX_IN_FLIGHT", 0),
		"give a machine that booted but never came back one more reboot, at most this many machines of a rollout at a time; 0 disables; the default for pools whose rollout.remediation is not set (env ANVIL_ROLLOUT_REMEDIATION_MAX_IN_FLIGHT)")
	fs.Float64Var(&c.KubeQPS, "kube-qps", svc.EnvFloat("ANVIL_ROLLOUT_KUBE_QPS", 200),
		"requests per second the service sends each workload cluster's API server; a machine costs about three (env ANVIL_ROLLOUT_KUBE_QPS)")
	fs.IntVar(&c.KubeBurst, "kube-burst", svc.EnvInt("ANVIL_ROLLOUT_KUBE_BURST", 400),
		"requests the service may send a workload cluster at once above --kube-qps (env ANVIL_ROLLOUT_KUBE_BURST)")
}

// Validate checks the parsed settings; errors name the flag and variable.
func (c *Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		flag, env string
		v         time.Duration
	}{{"lease-ttl", "ANVIL_ROLLOUT_LEASE_TTL", c.LeaseTTL}, {"poll", "ANVIL_ROLLOUT_POLL", c.Poll}, {"replan", "ANVIL_ROLLOUT_REPLAN", c.Replan}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s (env %s) = %s: must be positive", d.flag, d.env, d.v))
		}
	}
	if c.KubeQPS < 0 || c.KubeBurst < 0 {
		errs = append(errs, fmt.Errorf("--kube-qps (env ANVIL_ROLLOUT_KUBE_QPS) = %g and --kube-burst (env ANVIL_ROLLOUT_KUBE_BURST) = %d: must not be negative (0: the default)", c.KubeQPS, c.KubeBurst))
	}
	if c.RemediationMaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("--remediation-max-in-flight (env ANVIL_ROLLOUT_REMEDIATION_MAX_IN_FLIGHT) = %d: must not be negative (0 disables)", c.RemediationMaxInFlight))
	}
	return errors.Join(c.Config.Validate(), errors.Join(errs...))
}

func (c Config) withDefaults() (Config, error) {
	if c.Service == "" {
		c.Service = Name
	}
	if c.Instance == "" {
		c.Instance = svc.InstanceID()
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	var errs []error
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("--lease-ttl must be at least 1s, got %s", c.LeaseTTL))
	}
	if c.RemediationMaxInFlight < 0 || c.RemediationMaxInFlight > 1000 {
		errs = append(errs, fmt.Errorf("--remediation-max-in-flight must be between 0 and 1000, got %d", c.RemediationMaxInFlight))
	}
	if c.Poll < 0 || c.Replan < 0 {
		errs = append(errs, errors.New("--poll and --replan must not be negative"))
	}
	return c, errors.Join(errs...)
}

// NewRegistry returns a registry of every payload type the service reads.
func NewRegistry() *events.Registry {
	reg := events.NewRegistry()
	reg.RegisterAll(rollout.EventTypes())
	reg.RegisterAll(bootapi.EventTypes())
	reg.RegisterAll([]any{revapi.ApplyRequested{}}) // the revisions service's contract
	reg.RegisterAll(machineop.EventTypes())
	// The registry's machine events that start provisioning and machine
	// operations, as its contract has them.
	reg.RegisterAll(regapi.EventTypes())
	return reg
}

// Service is a running rollout service, for tests and benchmarks.
type Service struct {
	App      *app.App
	Rollouts *readmodel.Rollouts
	Runner   *projection.Runner
}

// Hooks adjust a service started by tests and benchmarks.
type Hooks struct {
	// Ready receives the service once it serves.
	Ready chan<- *Service
	// Clusters replaces the kubeconfig-backed cluster clients.
	Clusters app.Clusters
	// Now replaces the clock.
	Now func() time.Time
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error { return Start(ctx, cfg, o, Hooks{}) }

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
	log := rt.Log.With("instance", cfg.Instance)

	leases, err := adapters.NewLeases(ctx, rt.JS, cfg.Instance, cfg.LeaseTTL, cfg.StreamReplicas, log)
	if err != nil {
		return fmt.Errorf("%s: lease bucket: %w", Name, err)
	}
	revisions := adapters.Revisions{NC: rt.Conn}
	boot := adapters.NewFollowedBoot(adapters.Boot{NC: rt.Conn})
	clusters := h.Clusters
	if clusters == nil {
		cl := adapters.NewClusters(rt.Background(), revisions, log)
		if cfg.KubeQPS > 0 {
			cl.QPS = float32(cfg.KubeQPS)
		}
		if cfg.KubeBurst > 0 {
			cl.Burst = cfg.KubeBurst
		}
		clusters = cl
	}
	model := readmodel.NewRollouts()
	defer app.TrackRollouts(model)() // anvil_rollouts, read at scrape time
	ops := readmodel.NewOperations()
	a := &app.App{
		Operations: ops,
		Store:      rt.Store, Events: rt.Registry, Registry: adapters.NewRegistry(rt.Conn), Revisions: revisions,
		Boot: boot, Clusters: clusters, Leases: leases, Rollouts: model,
		Log: log, Now: h.Now, Metrics: app.DefaultMetrics(),
		Settings: app.Settings{Poll: cfg.Poll, Replan: cfg.Replan, Instance: cfg.Instance,
			RemediationMaxInFlight: cfg.RemediationMaxInFlight},
	}
	a.Defaults()
	model.OnChange = func(org, id string, created, active bool) {
		a.Notify.Notify(app.RolloutKey(org, id))
		if created && active {
			a.Notify.Notify(app.NewRolloutsKey())
		}
	}
	ops.OnChange = func(org, id string, created bool) {
		a.Notify.Notify(app.RolloutKey(org, id))
		if created {
			a.Notify.Notify(app.NewOperationsKey())
		}
	}
	runner := projection.NewRunner(projection.Config{Name: "rollout-rollouts", Instance: cfg.Instance,
		Filter: events.Filter{AggregateType: app.AggregateType}}, rt.JS, rt.Registry, model, rt.Poison, log)
	model.Waiter = runner
	opsRunner := projection.NewRunner(projection.Config{Name: "rollout-operations", Instance: cfg.Instance,
		Filter: events.Filter{AggregateType: machineop.AggregateType}}, rt.JS, rt.Registry, ops, rt.Poison, log)
	rt.Project(runner, opsRunner)
	rt.Go("change notifications", func(ctx context.Context) error {
		return adapters.Follow(ctx, rt.Conn, rt.JS, adapters.Hooks{
			Machine:         func(org, uuid string) { a.Notify.Notify(app.MachineKey(org, uuid)) },
			Rollout:         a.RolloutEvent,
			BootRecord:      boot.Observe,
			BootRecordsLost: boot.Forget,
		}, log)
	})
	router, err := handler.NewRouter(rt.JS, rt.Registry, rt.Poison, log, handler.Options{})
	if err != nil {
		return err
	}
	ports.RegisterEventHandlers(router, a)
	rt.HandleEvents(router)

	// Drivers start once the projections have caught up, so that the
	// supervisor sees every active rollout and operation.
	if !rt.CatchUp(ctx) {
		return rt.Wait(ctx)
	}
	rt.Go("rollout supervisor", func(ctx context.Context) error {
		// What the drivers and executors append, and the commands they
		// send, are the rollout service's own doing.
		a.Supervise(events.WithActor(ctx, "service:"+Name), 2*time.Second)
		return nil
	})
	if err := rt.ServeCommands(api.QueueGroup, 64, func(srv *command.Server) error { return ports.Register(srv, a) }); err != nil {
		return err
	}
	if err := rt.ServeReadiness(); err != nil {
		return err
	}
	rt.Started()
	log.Info("started", "lease_ttl", cfg.LeaseTTL, "poll", a.Settings.Poll, "replan", a.Settings.Replan)
	if h.Ready != nil {
		h.Ready <- &Service{App: a, Rollouts: model, Runner: runner}
	}
	return rt.Wait(ctx)
}
