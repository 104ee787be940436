// Command anvil-revisions runs the revisions service (clusters, machine
// pools, revisions, rendering). Its own flags and environment variables
// are in docs/revisions.md ("The service"), the shared ones in
// docs/operations.md. It needs an encryption key:
// ANVIL_REVISIONS_ENCRYPTION_KEYS=<id>:<base64 of 32 bytes>.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/libs/events/telemetry"
	"github.com/anvil-fleet/anvil/services/revisions/service"
)

func main() {
	var cfg service.Config
	fs := flag.NewFlagSet("anvil-revisions", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.SetupTracing(ctx, "anvil-revisions")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
	defer shutdown(context.Background())
	if err := service.Run(ctx, cfg, svc.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "anvil-revisions:", err)
		os.Exit(1)
	}
}
