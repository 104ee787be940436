package service

import (
	"context"
	"fmt"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/projection"
	"github.com/anvil-fleet/anvil/services/revisions/adapters/readmodel"
	"github.com/anvil-fleet/anvil/services/revisions/app"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
)

// The readiness check fails until the projection has caught up.
func TestProjectionReadiness(t *testing.T) {
	reg := NewRegistry()
	env := eventstest.Start(t, reg)
	ctx := context.Background()
	for i := range 50 {
		if _, err := env.Store.Append(ctx, app.CatalogRef, events.Any,
			events.New(catalog.VersionAdded{Version: fmt.Sprintf("1.30.%d", i)})...); err != nil {
			t.Fatal(err)
		}
	}
	model := readmodel.New()
	r := projection.NewRunner(projection.Config{Name: "ready-test", Filter: events.Filter{EventTypes: readmodel.EventTypes()}}, env.JS, reg, model, nil, nil)
	check := projectionReady(r)
	if err := check(ctx); err == nil {
		t.Fatal("ready before the projection ran")
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	if err := r.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := check(ctx); err != nil {
		t.Fatalf("not ready once live: %v", err)
	}
	if model.Checkpoint() != 50 || len(model.Catalog().State.Catalog.Versions()) != 50 {
		t.Fatalf("checkpoint = %d", model.Checkpoint())
	}
	cancel()
	<-done
}
