// Command anvil-revisions runs the revisions service (clusters, machine
// pools, revisions, rendering). Its own flags and environment variables
// are in docs/revisions.md ("The service"), the shared ones in
// docs/operations.md. It needs an encryption key:
// ANVIL_REVISIONS_ENCRYPTION_KEYS=<id>:<base64 of 32 bytes>.
package main

import (
	"context"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

func main() {
	var cfg service.Config
	svc.Main("anvil-revisions", &cfg, func(ctx context.Context) error { return service.Run(ctx, cfg, svc.Options{}) })
}
