// Package agent is anvil-agent, the program on each machine: it heartbeats to
// the boot service, reports what it booted and its hardware, and carries out
// instructions such as "reboot into revision N".
//
// An Agent is configured only through Config, so a simulator can run many of
// them in one process with its own Rebooter, fs root and journal.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-fleet/anvil/agent/client"
	"github.com/anvil-fleet/anvil/agent/inventory"
)

// Agent runs the heartbeat, report and instruction loops for one machine.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	client *client.Client
	recent *recentAcks

	running atomic.Bool
	// reportNudge asks the report loop to check now, e.g. after an
	// instruction changed the pending target revision.
	reportNudge chan struct{}
	// reportChecks counts report-loop passes, so a test can tell "nothing
	// changed, nothing sent" from "the loop has not run yet".
	reportChecks atomic.Int64

	mu            sync.Mutex
	state         persistedState
	pendingTarget string // revision an instruction asked for, if not booted
}

// New validates cfg, applies defaults and loads the state file. It does no
// network I/O; Run does.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		if hc, err = client.NewHTTPClient(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("agent config: %w", err)
		}
	}
	c, err := client.New(client.Config{
		BaseURL:     cfg.BootURL,
		MachineUUID: cfg.MachineUUID,
		Credential:  cfg.Credential,
		UserAgent:   "anvil-agent/" + cfg.Version,
		HTTPClient:  hc,
	})
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	a := &Agent{
		cfg:         cfg,
		log:         cfg.Logger.With("machine", cfg.MachineUUID),
		client:      c,
		recent:      newRecentAcks(),
		reportNudge: make(chan struct{}, 1),
	}
	if a.cfg.BootID == "" {
		if id, err := inventory.BootID(cfg.Root); err == nil {
			a.cfg.BootID = id
		} else {
			a.log.Warn("boot id unknown; a restart of the agent will be taken for a reboot", "error", err.Error())
		}
	}
	st, err := loadState(cfg.StateFile)
	if err != nil {
		// Starting without history risks acting on a redelivered instruction
		// again; refusing to start would leave the machine unmanageable.
		a.log.Error("cannot read state file; starting without instruction history", "state_file", cfg.StateFile, "error", err.Error())
	}
	a.state = st
	return a, nil
}

// Run runs the agent until ctx ends, then returns nil. Calls to the boot
// service that fail are retried, never returned: the agent has nothing better
// to do than keep trying.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent is already running")
	}
	defer a.running.Store(false)

	if a.cfg.BootedRevision == "" {
		a.log.Error("booted revision unknown (empty revision file); reporting an empty booted_revision")
	}
	a.log.Info("agent starting",
		"version", a.cfg.Version,
		"boot_url", a.cfg.BootURL,
		"booted_revision", a.cfg.BootedRevision,
		"boot_id", a.cfg.BootID,
		"heartbeat_interval", a.cfg.HeartbeatInterval.String(),
		"state_file", a.cfg.StateFile,
	)

	// The first heartbeat waits for the first report: both carry the
	// booted revision, and the boot service reports a revision it hears of
	// first to the registry, so that sent together at every boot they made
	// it do so twice.
	firstReport := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { a.heartbeatLoop(ctx, firstReport) })
	wg.Go(func() { a.reportLoop(ctx, sync.OnceFunc(func() { close(firstReport) })) })
	wg.Go(func() { a.instructionLoop(ctx) })
	wg.Wait()

	a.log.Info("agent stopped")
	return nil
}

// setPendingTarget records the revision the server wants this machine on;
// "" clears it. A change nudges the report loop because it changes the
// reboot-required indicator.
func (a *Agent) setPendingTarget(rev string) {
	if rev == a.cfg.BootedRevision {
		rev = ""
	}
	a.mu.Lock()
	changed := a.pendingTarget != rev
	a.pendingTarget = rev
	a.mu.Unlock()
	if changed {
		select {
		case a.reportNudge <- struct{}{}:
		default:
		}
	}
}

func (a *Agent) getPendingTarget() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pendingTarget
}

func (a *Agent) requestContext(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.RequestTimeout+extra)
}

func (a *Agent) newBackoff() *backoff {
	return &backoff{initial: a.cfg.RetryInitial, max: a.cfg.RetryMax}
}

// redact removes the credential from text that came from outside (server
// problem documents, response bodies) before it is logged.
func (a *Agent) redact(s string) string {
	if a.cfg.Credential == "" {
		return s
	}
	return strings.ReplaceAll(s, a.cfg.Credential, "[redacted]")
}

// logCallFailure logs a failed call so that an operator reading the journal
// knows what to fix: a rejected credential and an unknown machine say so.
func (a *Agent) logCallFailure(log *slog.Logger, op string, err error, attempt int, retryIn time.Duration) {
	attrs := []any{
		"op", op,
		"error", a.redact(err.Error()),
		"attempt", attempt,
		"retry_in", retryIn.Round(time.Millisecond).String(),
	}
	if code := client.StatusCode(err); code != 0 {
		attrs = append(attrs, "status", code)
	}
	switch code := client.StatusCode(err); {
	case client.IsAuth(err):
		log.Error("boot service rejected the agent credential; check "+EnvAgentCredential+" in the env file or re-issue the credential (will keep retrying)", attrs...)
	case code == 404:
		log.Error("boot service does not know this machine (will keep retrying)", attrs...)
	case code == 429:
		log.Warn("boot service is rate limiting the agent", attrs...)
	default:
		log.Warn("boot service call failed (will retry)", attrs...)
	}
}
