// Command anvil-agent runs on every anvil machine. It heartbeats to the boot
// service, reports the hardware and what it booted, and carries out reboot
// instructions. See docs/agent.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/anvil-fleet/anvil/agent"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "anvil-agent:", err)
		os.Exit(1)
	}
}

// run is main without the process: tests drive it with their own context.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("anvil-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	envFile := fs.String("env-file", "/etc/anvil/agent.env", "env file with ANVIL_BOOT_URL (or ANVIL_URL), ANVIL_AGENT_CREDENTIAL and optional ANVIL_MACHINE_UUID (default: the SMBIOS UUID), ANVIL_MACHINE_REVISION, ANVIL_CA_FILE, ANVIL_HEARTBEAT_SECONDS")
	revisionFile := fs.String("revision-file", "/etc/anvil/revision", "file whose first line is the machine revision this boot was rendered from")
	stateFile := fs.String("state-file", agent.DefaultStateFile, "where the last acted-on instruction is persisted across reboots")
	root := fs.String("root", "/", "root under which /proc, /sys and /run are read (for testing against a fake tree)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: anvil-agent [flags]\n\nRuns the anvil machine agent until SIGTERM or SIGINT.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *showVersion {
		fmt.Fprintln(stderr, "anvil-agent", version)
		return nil
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	env, err := agent.LoadEnvFile(*envFile)
	if err != nil {
		return fmt.Errorf("env file: %w", err)
	}
	cfg := agent.Config{
		Root:      *root,
		StateFile: *stateFile,
		Logger:    logger,
		Version:   version,
	}
	if err := agent.ApplyEnv(&cfg, env); err != nil {
		return fmt.Errorf("env file %s: %w", *envFile, err)
	}
	// A missing revision file must not keep the agent from running: its
	// heartbeat and startup log are how an operator finds out what went wrong.
	// The env file's ANVIL_MACHINE_REVISION (written by the same render)
	// stands in for it.
	fromEnv := cfg.BootedRevision
	if rev, err := agent.ReadRevisionFile(*revisionFile); err != nil {
		if fromEnv != "" {
			logger.Warn("cannot read the revision file; using "+agent.EnvMachineRevision+" from the env file", "revision_file", *revisionFile, "revision", fromEnv, "error", err.Error())
		} else {
			logger.Error("cannot read the revision file", "revision_file", *revisionFile, "error", err.Error())
		}
	} else {
		if fromEnv != "" && fromEnv != rev {
			logger.Warn("the revision file and "+agent.EnvMachineRevision+" disagree; the revision file wins", "revision_file", *revisionFile, "file_revision", rev, "env_revision", fromEnv)
		}
		cfg.BootedRevision = rev
	}
	cfg.Rebooter = agent.SystemctlRebooter{Logger: logger}

	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
