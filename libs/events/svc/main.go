package svc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/anvil-fleet/anvil/libs/events/telemetry"
)

// Configurable is a service's configuration: its flags, each defaulting to
// an environment variable, and a check of the values once parsed.
type Configurable interface {
	RegisterFlags(*flag.FlagSet)
	Validate() error
}

// Main is every service binary's main: it parses the flags (each with its
// environment default), stops with exit code 2 and every problem named
// when a flag, an environment variable or a value is malformed, sets up
// tracing, and runs the service until SIGINT or SIGTERM. A failure is
// printed and exits 1.
func Main(binary string, cfg Configurable, run func(context.Context) error) {
	fs := flag.NewFlagSet(binary, flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := CheckConfig(fs, cfg.Validate); err != nil {
		fmt.Fprintf(os.Stderr, "%s: invalid configuration:\n%s\n", binary, indent(err))
		os.Exit(2)
	}
	if err := mainRun(binary, run); err != nil {
		fmt.Fprintln(os.Stderr, binary+":", err)
		os.Exit(1)
	}
}

// CheckConfig is what Main checks once the flags are parsed: no stray
// arguments, no malformed environment variable, and validate's verdict.
func CheckConfig(fs *flag.FlagSet, validate func() error) error {
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q: every setting is a --flag (see -h)", fs.Arg(0)))
	}
	errs = append(errs, ConfigError())
	if validate != nil {
		errs = append(errs, validate())
	}
	return errors.Join(errs...)
}

func indent(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
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
