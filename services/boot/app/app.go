// Package app holds the boot service's use cases, one per file: the iPXE
// scripts, the Ignition config, the agent API and the instruction handlers.
// They depend on narrow interfaces (the registry, the revisions service,
// the KV stores), never on NATS or HTTP.
package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/record"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Registry is what the boot service asks of the registry.
type Registry interface {
	// SelfRegister verifies the enrollment token, registers an unknown
	// machine, lets a pre-registered one take over its configuration and
	// records the iPXE boot.
	SelfRegister(ctx context.Context, r regapi.SelfRegister) (regapi.SelfRegisterReply, error)
	GetMachine(ctx context.Context, org, uuid string) (regapi.Machine, error)
	// GetMachineAt reads the machine as of a stream sequence or later
	// (exact even while the registry's projection lags).
	GetMachineAt(ctx context.Context, org, uuid string, seq uint64) (regapi.Machine, error)
	Heartbeat(ctx context.Context, org, uuid string, at time.Time) error
	// Command runs one machine command (RecordIgnition, ReportHardware…).
	Command(ctx context.Context, org, uuid string, cmd regapi.MachineCommand) error
}

// BootReporter is a Registry that takes many machines' iPXE boots in one
// request (the registry's ReportIPXEBoots): one result per boot, in order.
type BootReporter interface {
	ReportIPXEBoots(ctx context.Context, boots []regapi.ReportedIPXEBoot) ([]regapi.IPXEBootResult, error)
}

// Flatcar is the OS image a pool revision boots.
type Flatcar struct {
	Channel, Version string
}

// Revisions is what the boot service asks of the revisions service.
type Revisions interface {
	// Flatcar returns the Flatcar channel and version of a pool revision.
	Flatcar(ctx context.Context, org, pool string, revision uint64) (Flatcar, error)
}

// IgnitionRequest names a machine revision: a pool revision plus the
// machine's hostname and labels.
type IgnitionRequest struct {
	Org      string
	Pool     string
	Revision uint64
	Hostname string
	Labels   map[string]string
}

// Rendered is a machine revision's Ignition config, which still holds the
// credential placeholder. Ignition is shared: callers must not modify it.
type Rendered struct {
	MachineRevisionID string
	Ignition          []byte
}

// IgnitionSource renders machine revisions (through a cache, in
// production).
type IgnitionSource interface {
	Ignition(ctx context.Context, r IgnitionRequest) (Rendered, error)
}

// Records stores the per-machine boot records (record.Record).
type Records interface {
	// Get returns the machine's record, or a zero record (Org and UUID
	// set) if there is none.
	Get(ctx context.Context, org, uuid string) (record.Record, error)
	// Update applies fn to the current record and stores the result if fn
	// says it changed something, retrying on concurrent updates. It
	// returns the record as stored (or as read, if unchanged).
	Update(ctx context.Context, org, uuid string, fn func(*record.Record) (bool, error)) (record.Record, error)
	// UpdateFrom is Update whose first attempt applies fn to read (a
	// record Get returned, with its Revision) instead of reading it again.
	UpdateFrom(ctx context.Context, read record.Record, fn func(*record.Record) (bool, error)) (record.Record, error)
	// Wait returns a channel that is closed at the next change of the
	// machine's record (on any replica), and a function to stop waiting.
	Wait(org, uuid string) (<-chan struct{}, func())
}

// StartupLogs stores the last startup log of each machine.
type StartupLogs interface {
	Put(ctx context.Context, l api.StartupLog) error
	// Get returns the log, or errs.KindNotFound.
	Get(ctx context.Context, org, uuid string) (api.StartupLog, error)
}

// Settings are the configured behaviours.
type Settings struct {
	// PublicURL is the boot service's configured public URL (empty: each
	// request's Host); resolved assets' URLs are under it.
	PublicURL string
	// AssetsDir is the assets directory ("" if none), named in the reasons
	// a missing asset is given.
	AssetsDir string
	// AssetBaseURL is the template of the Flatcar PXE images' directory
	// (see ipxe.AssetBase); one starting with "/" is relative to the boot
	// service's own base URL.
	AssetBaseURL string
	KernelArgs   []string
	// BootTokenTTL is how long a per-boot token is accepted at /ignition.
	BootTokenTTL time.Duration
	// RetryInitial and RetryMax bound the backoff of iPXE retries.
	RetryInitial, RetryMax time.Duration
	// InstructionTTL is how long an instruction without an expiry of its
	// own waits to be accepted.
	InstructionTTL time.Duration
	// MaxPollWait caps the agent's long-poll wait.
	MaxPollWait time.Duration
}

// App is the boot service's application layer.
type App struct {
	Registry    Registry
	Revisions   Revisions
	Renderer    IgnitionSource
	Records     Records
	StartupLogs StartupLogs
	// Assets is the index of the assets directory (nil: none configured).
	Assets   Assets
	Keys     signing.Keys
	Settings Settings
	// Known answers /ipxe for machines that boot again (nil: every
	// /ipxe asks the registry).
	Known *KnownMachines
	// LastIgnitions records Ignition runs in the registry off the request
	// path (nil: /ignition records them itself).
	LastIgnitions *LastIgnitions
	Log           *slog.Logger
	Now           func() time.Time
	// Rand returns a number in [0,1) that spreads retry delays.
	Rand func() float64

	// lastRetry is the last retry URL /ipxe built: a rack boots with one
	// enrollment token through one base URL, mostly at attempt 0.
	lastRetry atomic.Pointer[retryURL]
}

type retryURL struct {
	base, token string
	attempt     int
	url         string
}

// machineURL is ipxe.MachineURL(base, token, attempt), built once for
// the requests that share them.
func (a *App) machineURL(base, token string, attempt int) string {
	if r := a.lastRetry.Load(); r != nil && r.attempt == attempt && r.base == base && r.token == token {
		return r.url
	}
	u := ipxe.MachineURL(base, token, attempt)
	a.lastRetry.Store(&retryURL{base: base, token: token, attempt: attempt, url: u})
	return u
}

// Defaults fills in the zero fields.
func (a *App) Defaults() {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Rand == nil {
		a.Rand = rand.Float64
	}
	if a.Log == nil {
		a.Log = slog.Default()
	}
	s := &a.Settings
	if s.BootTokenTTL <= 0 {
		s.BootTokenTTL = time.Hour
	}
	if s.RetryInitial <= 0 {
		s.RetryInitial = 5 * time.Second
	}
	if s.RetryMax <= 0 {
		s.RetryMax = 5 * time.Minute
	}
	if s.InstructionTTL <= 0 {
		s.InstructionTTL = time.Hour
	}
	if s.MaxPollWait <= 0 {
		s.MaxPollWait = 60 * time.Second
	}
}

// backoff is the delay before retry attempt+1.
func (a *App) backoff(attempt int) int {
	return ipxe.Backoff(attempt, a.Settings.RetryInitial, a.Settings.RetryMax, a.Rand())
}

// hostname is what a machine is called in its Ignition config: its node
// name as the registry derives it (the name an operator gave it, or else
// its UUID), so that its Ignition, its Node and the API agree.
func hostname(m regapi.Machine) string {
	return regapi.NodeNameOf(m.Hostname, m.UUID)
}

// update applies fn to a copy of rec first, and writes through Records
// only if it changes something: the hot paths (heartbeats, /ignition of an
// unchanged machine) then cost no write, and a write costs no second read
// of the record unless another update came in between.
func (a *App) update(ctx context.Context, rec record.Record, fn func(*record.Record) (bool, error)) (record.Record, error) {
	return a.Records.UpdateFrom(ctx, rec, fn)
}

// unavailable reports whether err means a dependency is down.
func unavailable(err error) bool { return errs.Is(err, errs.KindUnavailable) }
