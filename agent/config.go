package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/agent/inventory"
)

// Defaults for Config fields left zero.
const (
	DefaultStateFile         = "/var/lib/anvil-agent/state.json"
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultReportInterval    = 5 * time.Minute
	DefaultRebootCheck       = 15 * time.Second
	DefaultPollWait          = 30 * time.Second
	DefaultMinPollInterval   = time.Second
	DefaultRetryInitial      = time.Second
	DefaultRetryMax          = 60 * time.Second
	DefaultRequestTimeout    = 30 * time.Second
	DefaultJournalLines      = 200
)

// Config is everything an Agent needs. Nothing is read from globals, so a
// simulator can run many agents in one process, each with its own Config.
type Config struct {
	// BootURL is the boot service, e.g. https://boot.example:8443
	// (ANVIL_BOOT_URL, or ANVIL_URL as the renderer writes it).
	BootURL string
	// MachineUUID is the SMBIOS UUID (ANVIL_MACHINE_UUID); it is lowercased.
	// Empty reads <Root>/sys/class/dmi/id/product_uuid, which is what the
	// renderer's env file relies on: it carries no UUID.
	MachineUUID string
	// Credential is the bearer secret bound to MachineUUID
	// (ANVIL_AGENT_CREDENTIAL). It is never logged.
	Credential string
	// CAFile is a PEM bundle trusted for BootURL in addition to the system
	// roots (ANVIL_CA_FILE). Ignored when HTTPClient is set.
	CAFile string
	// HTTPClient overrides the agent's own client, e.g. to share one
	// transport among many simulated agents. Leave its Timeout zero.
	HTTPClient *http.Client

	// BootedRevision is the machine revision this boot was rendered from
	// (/etc/anvil/revision). Empty means unknown; the agent still runs.
	BootedRevision string
	// BootID identifies this boot; it tells a reboot apart from a mere agent
	// restart. Empty reads <Root>/proc/sys/kernel/random/boot_id.
	BootID string
	// Root is where /proc, /sys and /run are read from. Default "/".
	Root string
	// StateFile persists the last acted-on instruction. Default
	// DefaultStateFile under Root.
	StateFile string

	// HeartbeatInterval is the mean time between heartbeats; each wait is
	// jittered by ±20%. Default 30s (ANVIL_HEARTBEAT_SECONDS).
	HeartbeatInterval time.Duration
	// ReportInterval is how often the hardware and reboot indicator are
	// checked for changes. Default 5m.
	ReportInterval time.Duration
	// RebootCheck is how often the reboot indicator alone (a stat of
	// /run/reboot-required) is checked between reports; a change is
	// reported at once. Default 15s.
	RebootCheck time.Duration
	// PollWait is the long-poll wait sent to the server. Default 30s.
	PollWait time.Duration
	// MinPollInterval is the least time between two polls, so a server that
	// answers at once cannot make the agent spin. Default 1s.
	MinPollInterval time.Duration
	// RetryInitial and RetryMax bound the exponential backoff after failed
	// calls. Defaults 1s and 60s.
	RetryInitial, RetryMax time.Duration
	// RequestTimeout bounds each call (the long poll gets PollWait on top).
	// Default 30s.
	RequestTimeout time.Duration

	// Rebooter carries out reboots. Default: SystemctlRebooter.
	Rebooter Rebooter
	// Journal provides the startup log. Default: Journalctl.
	Journal JournalSource
	// JournalLines is how many journal lines a report carries. Default 200.
	JournalLines int

	// Logger receives the agent's logs. Default: JSON to stderr.
	Logger *slog.Logger
	// Version goes into the User-Agent (anvil-agent/<version>). Default "dev".
	Version string
}

var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// withDefaults validates cfg and fills in zero fields.
func (cfg Config) withDefaults() (Config, error) {
	var errs []error
	setDefault(&cfg.Root, "/")
	cfg.MachineUUID = strings.ToLower(strings.TrimSpace(cfg.MachineUUID))
	if cfg.MachineUUID == "" {
		id, err := inventory.MachineUUID(cfg.Root)
		if err != nil {
			errs = append(errs, fmt.Errorf("machine UUID: %s is not set and %w", EnvMachineUUID, err))
		}
		cfg.MachineUUID = id
	} else if !canonicalUUID.MatchString(cfg.MachineUUID) {
		errs = append(errs, fmt.Errorf("machine UUID %q is not a canonical UUID", cfg.MachineUUID))
	}
	if cfg.BootURL == "" {
		errs = append(errs, errors.New("boot URL is empty"))
	}
	if cfg.Credential == "" {
		errs = append(errs, errors.New("agent credential is empty"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"heartbeat interval", cfg.HeartbeatInterval}, {"report interval", cfg.ReportInterval}, {"reboot check", cfg.RebootCheck},
		{"poll wait", cfg.PollWait}, {"min poll interval", cfg.MinPollInterval},
		{"retry initial", cfg.RetryInitial}, {"retry max", cfg.RetryMax}, {"request timeout", cfg.RequestTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative", d.name))
		}
	}
	if len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}

	setDefault(&cfg.StateFile, filepath.Join(cfg.Root, DefaultStateFile))
	setDefault(&cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&cfg.ReportInterval, DefaultReportInterval)
	setDefault(&cfg.RebootCheck, DefaultRebootCheck)
	setDefault(&cfg.PollWait, DefaultPollWait)
	setDefault(&cfg.MinPollInterval, DefaultMinPollInterval)
	setDefault(&cfg.RetryInitial, DefaultRetryInitial)
	setDefault(&cfg.RetryMax, DefaultRetryMax)
	setDefault(&cfg.RequestTimeout, DefaultRequestTimeout)
	setDefault(&cfg.JournalLines, DefaultJournalLines)
	setDefault(&cfg.Version, "dev")
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryInitial)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.Rebooter == nil {
		cfg.Rebooter = SystemctlRebooter{Logger: cfg.Logger}
	}
	if cfg.Journal == nil {
		cfg.Journal = Journalctl{}
	}
	return cfg, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
