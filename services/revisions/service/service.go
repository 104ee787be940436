// Package service wires the revisions service: its runtime, read model,
// event handlers and NATS ports.
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/handler"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/bootassets"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/readmodel"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/registry"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
	"github.com/anvil-fleet/anvil/services/revisions/ports"
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

// Run starts the service and blocks until ctx ends, then stops cleanly: it
// stops taking requests, lets running ones finish, then stops the handlers
// and the projection.
func Run(ctx context.Context, cfg Config, o svc.Options) error {
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

	reg := NewRegistry()
	rt, err := svc.Start(ctx, cfg.Config, reg, o)
	if err != nil {
		return err
	}
	defer rt.Close(context.WithoutCancel(ctx))

	// Background work outlives ctx a little: requests in flight may wait
	// for the projection, so it stops after the command server.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()

	model := readmodel.New()
	runner := projection.NewRunner(projection.Config{
		Name:     Name,
		Filter:   events.Filter{EventTypes: readmodel.EventTypes()},
		Instance: instanceID(), // each replica keeps its own model
	}, rt.JS, reg, model, rt.Poison, rt.Log)
	rt.Health.Add("projection", projectionReady(runner))
	runnerDone := make(chan error, 1)
	go func() { runnerDone <- runner.Run(bg) }()

	cache := render.NewCache(cfg.renderCacheBytes())
	unregister := trackCache(cache)
	defer unregister()
	application := app.New(app.Deps{
		Store: rt.Store, Registry: reg, Model: model, Projection: runner,
		Keys: keys, Nonces: rand.Reader, Clock: time.Now,
		Renderer: cache, RenderOptions: renderOpts, Log: rt.Log,
		Assets: bootassets.Client{NC: rt.Conn}, AssetSettings: assetSettings,
		Machines: registry.Machines{NC: rt.Conn},
	})

	// The catalog exists before any command is served.
	seedCtx := events.WithActor(ctx, app.PlatformActor)
	if cat, seeded, err := application.Commands.SeedCatalog.Handle(seedCtx, seed); err != nil {
		return fmt.Errorf("%s: seeding the Kubernetes version catalog: %w", Name, err)
	} else if seeded {
		rt.Log.Info("Kubernetes version catalog seeded", "versions", seed, "version", cat.Version)
	}

	router, err := handler.NewRouter(rt.JS, reg, rt.Poison, rt.Log, handler.Options{})
	if err != nil {
		return err
	}
	planner := application.Events.PlanPlatformRevisions
	router.Handle(PlatformRevisionsHandler, events.Filter{
		Org: app.CatalogRef.Org, AggregateType: app.CatalogRef.Type, AggregateID: app.CatalogRef.ID,
		EventTypes: planner.EventTypes(),
	}, planner.Handle)
	rt.Health.Add("handlers", func(context.Context) error {
		select {
		case <-router.Running():
			return nil
		default:
			return errors.New("event handlers are not running yet")
		}
	})
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(bg) }()

	// Queries read the model, so the replica answers only once it has
	// caught up (and its event handlers run); until then other replicas
	// (or nobody: "unavailable") answer.
	select {
	case <-ctx.Done():
	case <-waitLive(bg, runner):
	case err := <-routerDone:
		return fmt.Errorf("%s: event handlers stopped: %w", Name, err)
	}
	select {
	case <-ctx.Done():
	case <-router.Running():
	case err := <-routerDone:
		return fmt.Errorf("%s: event handlers stopped: %w", Name, err)
	}
	var srv *command.Server
	if ctx.Err() == nil {
		srv = command.NewServer(rt.Conn, api.QueueGroup, Concurrency, rt.Log)
		if err := ports.Register(srv, application); err != nil {
			srv.Close()
			return fmt.Errorf("%s: %w", Name, err)
		}
		if err := rt.ServeReadiness(); err != nil {
			srv.Close()
			return fmt.Errorf("%s: %w", Name, err)
		}
		rt.Started()
		rt.Log.Info("serving", "subjects", len(api.Subjects), "boot_url", renderOpts.BaseURL, "keys", len(keys))
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-routerDone:
		runErr = fmt.Errorf("%s: event handlers stopped: %w", Name, err)
		routerDone <- nil
	}
	if srv != nil {
		srv.Close()
	}
	stopBG()
	_ = router.Close()
	<-routerDone
	<-runnerDone
	rt.Log.Info("stopped")
	return runErr
}

// projectionReady is the readiness check: it fails until the read model
// has caught up with the log.
func projectionReady(r *projection.Runner) func(context.Context) error {
	return func(context.Context) error {
		if !r.Live() {
			return fmt.Errorf("the read model is catching up with the log (%d events behind)", r.Lag())
		}
		return nil
	}
}

func waitLive(ctx context.Context, r *projection.Runner) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		if r.WaitLive(ctx) == nil {
			close(ch)
		}
	}()
	return ch
}

func instanceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
