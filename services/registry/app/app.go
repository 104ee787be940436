// Package app holds the registry's command and query handlers, one per file.
// They depend on narrow interfaces, not on NATS.
package app

import (
	"context"
	"io"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/aggregate"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/domain/enrollment"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/domain/org"
	"github.com/anvil-fleet/anvil/services/registry/readmodel"
)

// Machines reads the machine projection.
type Machines interface {
	Model() *readmodel.Model
}

// Orgs reads the organization projection.
type Orgs interface {
	Get(id string) (readmodel.OrgView, error)
	List() []readmodel.OrgView
	ByToken(tokenID string) (readmodel.OrgView, bool)
}

// Heartbeats stores last-seen times.
type Heartbeats interface {
	Record(ctx context.Context, org, uuid string, t time.Time) error
}

// IPXEBoots stores each machine's latest iPXE boot outside the log, as
// Heartbeats stores its last heartbeat (see machine.IPXEBootDue).
type IPXEBoots interface {
	Record(ctx context.Context, org, uuid string, at, retryBy time.Time) error
}

// Enrollment keeps, per enrollment token, how many machines it registered
// and its rate limiter's bucket. seed counts a token's machines when
// nothing is stored for it yet.
type Enrollment interface {
	// Admit counts one new registration, or refuses it with a
	// *enrollment.CapReached or *enrollment.RateLimited.
	Admit(ctx context.Context, org, tokenID string, l enrollment.Limits, now time.Time, seed func() int) error
	// Release gives back an admission whose registration did not happen.
	Release(ctx context.Context, org, tokenID string, l enrollment.Limits, now time.Time) error
	// Count counts a registration that happened without an admission.
	Count(ctx context.Context, org, tokenID string, seed func() int) error
	Registered(ctx context.Context, org, tokenID string, seed func() int) (int, error)
}

// Versions reads an aggregate's version without reading its events.
type Versions interface {
	Version(ctx context.Context, ref events.AggregateRef) (uint64, error)
}

// App is the registry's application layer.
type App struct {
	Store    events.Store
	Machines Machines
	// WaitMachines waits until the machines' projection applied a stream
	// sequence (read-your-writes); nil: reads never wait.
	WaitMachines func(ctx context.Context, seq uint64) error
	Orgs         Orgs
	Heartbeats   Heartbeats
	Now          func() time.Time
	Rand         io.Reader // token secrets
	// OfflineAfter is the heartbeat silence after which a machine goes offline.
	OfflineAfter time.Duration

	// IPXEBoots keeps each machine's latest iPXE boot, and IPXERecordEvery
	// is how often a boot that changes nothing is recorded in the log
	// (machine.IPXEBootDue). Without IPXEBoots every boot is recorded.
	IPXEBoots       IPXEBoots
	IPXERecordEvery time.Duration
	// Enrollment enforces each enrollment token's max_machines and the
	// registration rate EnrollmentRate (per second, <= 0: none) with
	// EnrollmentBurst at once; nil: no limits.
	Enrollment      Enrollment
	EnrollmentRate  float64
	EnrollmentBurst int
	// Versions, when set, confirms a decision made on the read model's copy
	// that appends nothing (a no-op or a refusal) with one direct read of
	// the aggregate's version, instead of reading all its events.
	Versions Versions
	// Retry bounds and spaces the re-decisions of a command that lost an
	// optimistic-concurrency race; zero: aggregate's defaults.
	Retry aggregate.Retry
}

const (
	machineType = "machine"
	orgType     = "org"
)

// machines runs commands on machines: it starts from the read model's copy
// when the caller offers one, and a refusal or no-op decided on it stands
// only when the log's version (Versions) confirms the copy.
func (a *App) machines() *aggregate.Executor[machine.State] {
	x := &aggregate.Executor[machine.State]{Store: a.Store, Registry: registry, Clock: a.Now, Retry: a.Retry,
		Apply: func(s machine.State, _ *events.Envelope, p any) machine.State {
			s.Apply(p)
			return s
		}}
	if a.Versions != nil {
		x.Version = a.Versions.Version
	}
	return x
}

// orgs runs commands on organizations, always on the log.
func (a *App) orgs() *aggregate.Executor[org.State] {
	return &aggregate.Executor[org.State]{Store: a.Store, Registry: registry, Clock: a.Now, Retry: a.Retry,
		Apply: func(s org.State, _ *events.Envelope, p any) org.State {
			s.Apply(p)
			return s
		}}
}

// Registry is every payload type the registry reads.
func Registry() *events.Registry { return registry }

var registry = func() *events.Registry {
	r := events.NewRegistry()
	r.RegisterAll(machine.EventTypes())
	r.RegisterAll(org.EventTypes())
	return r
}()

// validOrg checks an organization ID given in a request's "org" field.
func validOrg(f *errs.Fields, id string) {
	if err := org.ValidateID(id); err != nil {
		for _, fe := range errs.As(err).Fields {
			f.Add("org", "%s", fe.Reason)
		}
	}
}

func types(envs []events.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.Type
	}
	return out
}
