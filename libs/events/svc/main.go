package svc

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-fleet/anvil/libs/events/telemetry"
)

// Main is every service binary's main: it parses the flags (each with its
// environment default), sets up tracing, and runs the service until SIGINT
// or SIGTERM. A failure is printed and exits 1.
func Main(binary string, register func(*flag.FlagSet), run func(context.Context) error) {
	fs := flag.NewFlagSet(binary, flag.ExitOnError)
	register(fs)
	_ = fs.Parse(os.Args[1:])
	if err := mainRun(binary, run); err != nil {
		fmt.Fprintln(os.Stderr, binary+":", err)
		os.Exit(1)
	}
}

func mainRun(binary string, run func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := telemetry.SetupTracing(ctx, binary)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer shutdown(context.Background())
	return run(ctx)
}
