// Command anvil-gateway runs the gateway service; see docs/operations.md for its
// flags and environment variables.
package main

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/gateway/service"
)

func main() {
	var cfg service.Config
	svc.Main("anvil-gateway", &cfg, func(ctx context.Context) error { return service.Run(ctx, cfg, svc.Options{}) })
}
