package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"
)

// Rebooter carries out a reboot. Reboot returns once the reboot has been
// started, not when it is over: the real machine goes down afterwards, while a
// simulator may restart its agent with a new revision and boot ID.
type Rebooter interface {
	Reboot(ctx context.Context, reason string) error
}

// RebooterFunc adapts a function to a Rebooter.
type RebooterFunc func(ctx context.Context, reason string) error

func (f RebooterFunc) Reboot(ctx context.Context, reason string) error { return f(ctx, reason) }

// SystemctlRebooter asks systemd for an orderly reboot, so kubelet and
// containerd stop cleanly and the journal is flushed.
type SystemctlRebooter struct {
	Logger *slog.Logger
	// Path to systemctl; default "systemctl" from PATH.
	Path string
}

func (r SystemctlRebooter) Reboot(ctx context.Context, reason string) error {
	path := r.Path
	if path == "" {
		path = "systemctl"
	}
	// --message lands in the journal of the boot being shut down, so the
	// reason survives next to the logs it explains.
	args := []string{"reboot", "--message=anvil-agent: " + reason}
	if r.Logger != nil {
		r.Logger.Info("running reboot command", "command", path, "args", args)
	}
	// Detached from ctx: the shutdown this starts sends the agent SIGTERM,
	// which must not kill systemctl half-way and turn success into an error.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", path, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
