// Command anvil-registry runs the registry service; see docs/operations.md for its
// flags and environment variables.
package main

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

func main() {
	var cfg service.Config
	svc.Main("anvil-registry", &cfg, func(ctx context.Context) error { return service.Run(ctx, cfg, svc.Options{}) })
}
