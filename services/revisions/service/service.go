// Package service wires the revisions service: its runtime, read model,
// event handlers and NATS ports.
package service

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/bootassets"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/registry"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/ports"
	"github.com/anvil-fleet/anvil/services/revisions/readmodel"
)

// PlatformRevisionsHandler is the durable name of the handler that turns a
// catalog.version_added into platform revisions (its consumer is
// "handler-" + this).
const PlatformRevisionsHandler = "revisions-platform-revisions"

// Concurrency bounds the command handlers running at once per replica.
const Concurrency = 64

// NewRegistry returns a registry of every payload type the service reads.
func NewRegistry() *events.Registry {
	reg := events.NewRegistry()
	reg.RegisterAll(cluster.EventTypes())
	reg.RegisterAll(pool.EventTypes())
	reg.RegisterAll(catalog.EventTypes())
	return reg
}

// Service is a running revisions service, for tests and the dev stack.
type Service struct {
	App        *app.App
	Projection *projection.Runner
}

// Hooks adjust a service started by tests and the dev stack.
type Hooks struct {
	// Ready receives the service once it serves.
	Ready chan<- *Service
	// Now replaces the clock (the times commands record).
	Now func() time.Time
}

// Run starts the service and blocks until ctx ends.
func Run(ctx context.Context, cfg Config, o svc.Options) error { return Start(ctx, cfg, o, Hooks{}) }

// Start runs the service until ctx ends or its background work fails.
func Start(ctx context.Context, cfg Config, o svc.Options, h Hooks) error {
	if cfg.Service == "" {
		cfg.Service = Name
	}
	keys, err := ParseEncryptionKeys(cfg.EncryptionKeys)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	seed, err := cfg.kubernetesVersions()
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	renderOpts, assetSettings, err := cfg.renderOptions()
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	if h.Now == nil {
		h.Now = time.Now
	}

	reg := NewRegistry()
	rt, err := svc.Start(ctx, cfg.Config, reg, o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))

	model := readmodel.New()
	runner := projection.NewRunner(projection.Config{
		Name:     Name,
		Filter:   events.Filter{EventTypes: readmodel.EventTypes()},
		Instance: svc.InstanceID(), // each replica keeps its own model
	}, rt.JS, reg, model, rt.Poison, rt.Log)
	rt.Project(runner)

	cache := render.NewCache(cfg.renderCacheBytes())
	unregister := trackCache(cache)
	defer unregister()
	a := &app.App{
		Store: rt.Store, Registry: reg, Model: model, Projection: runner,
		Keys: keys, Nonces: rand.Reader, Now: h.Now,
		Renderer: cache, RenderOptions: renderOpts, Log: rt.Log,
		Assets: bootassets.Client{NC: rt.Conn}, AssetSettings: assetSettings,
		Machines: registry.Machines{NC: rt.Conn},
	}
	a.Defaults()

	// The catalog exists before any command is served.
	seedCtx := events.WithActor(ctx, app.PlatformActor)
	if cat, seeded, err := a.SeedCatalog(seedCtx, seed); err != nil {
		return fmt.Errorf("%s: seeding the Kubernetes version catalog: %w", Name, err)
	} else if seeded {
		rt.Log.Info("Kubernetes version catalog seeded", "versions", seed, "version", cat.Version)
	}

	router, err := handler.NewRouter(rt.JS, reg, rt.Poison, rt.Log, handler.Options{})
	if err != nil {
		return err
	}
	router.Handle(PlatformRevisionsHandler, events.Filter{
		Org: app.CatalogRef.Org, AggregateType: app.CatalogRef.Type, AggregateID: app.CatalogRef.ID,
		EventTypes: app.PlanPlatformRevisionsEventTypes(),
	}, a.PlanPlatformRevisions)
	rt.HandleEvents(router)

	// Queries read the model, so the replica answers only once it has
	// caught up (and its event handlers run); until then other replicas
	// (or nobody: "unavailable") answer.
	if !rt.CatchUp(ctx) {
		return rt.Wait(ctx)
	}
	if err := rt.ServeCommands(api.QueueGroup, Concurrency, func(srv *command.Server) error { return ports.Register(srv, a) }); err != nil {
		return err
	}
	if err := rt.ServeReadiness(); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	rt.Started()
	rt.Log.Info("started", "subjects", len(api.Subjects), "boot_url", renderOpts.BaseURL, "keys", len(keys))
	if h.Ready != nil {
		h.Ready <- &Service{App: a, Projection: runner}
	}
	return rt.Wait(ctx)
}

// errsFields lists a validation error's fields as (field, reason) pairs.
func errsFields(err error) [][2]string {
	var out [][2]string
	for _, f := range errs.As(err).Fields {
		out = append(out, [2]string{f.Field, f.Reason})
	}
	if len(out) == 0 && err != nil {
		out = append(out, [2]string{"", err.Error()})
	}
	return out
}
