// Package app holds the registry's command and query handlers, one per file.
// They depend on narrow interfaces, not on NATS.
package app

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/adapters"
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
	Get(id string) (adapters.OrgView, error)
	List() []adapters.OrgView
	ByToken(tokenID string) (adapters.OrgView, bool)
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
}

const (
	machineType = "machine"
	orgType     = "org"
	// maxAttempts bounds re-deciding after losing an optimistic-concurrency race.
	maxAttempts = 8
)

// decideAndAppend loads an aggregate, decides, and appends, re-deciding on a
// lost race unless the caller pinned the version it expects.
// It returns the state after the appended events.
//
// cached, when not nil, offers the projection's copy of the state and its
// version as the starting point, which saves reading the log. It is trusted
// only as far as the optimistic append confirms it: a stale copy costs a
// conflict, and any refusal or no-op decided on it is decided again on the
// log.
//
// versionOf, when not nil, reads the aggregate's version from the log
// without its events: a refusal or a no-op decided on a cached copy at that
// very version stands without reading the log.
func decideAndAppend[S any](ctx context.Context, store events.Store, ref events.AggregateRef, expected uint64,
	cached func() (S, uint64), fold func(envs []events.Envelope) (S, error), decide func(S) ([]any, error), evolve func(S, []any) S,
	versionOf func(context.Context, events.AggregateRef) (uint64, error)) (S, []events.Envelope, uint64, error) {
	var zero S
	for attempt := 0; ; attempt++ {
		var state S
		var version uint64
		if attempt == 0 && cached != nil {
			state, version = cached()
		} else {
			envs, err := store.Load(ctx, ref)
			if err != nil {
				return zero, nil, 0, err
			}
			version = events.Version(envs)
			if state, err = fold(envs); err != nil {
				return zero, nil, version, err
			}
		}
		if expected != 0 && expected != version {
			if attempt == 0 && cached != nil {
				continue // the projection may lag: ask the log
			}
			return zero, nil, version, errs.Precondition("%s is at version %d, not %d", ref.Type, version, expected)
		}
		evs, err := decide(state)
		if (err != nil || len(evs) == 0) && attempt == 0 && cached != nil {
			// Only an append checks that the cached copy was current; a
			// refusal or a no-op decided on it must be decided again on the
			// log, unless the log's version says that the copy is current.
			if versionOf != nil {
				if v, verr := versionOf(ctx, ref); verr == nil && v == version {
					return state, nil, version, err
				}
			}
			continue
		}
		if err != nil || len(evs) == 0 {
			return state, nil, version, err
		}
		drafts := make([]events.Draft, len(evs))
		for i, e := range evs {
			p, ok := e.(events.Payload)
			if !ok {
				return zero, nil, version, errs.Internal("event %T has no EventType", e)
			}
			drafts[i] = events.Draft{Payload: p}
		}
		stored, err := store.Append(ctx, ref, version, drafts...)
		var conflict *events.ConflictError
		if errors.As(err, &conflict) && (expected == 0 || attempt == 0 && cached != nil) && attempt+1 < maxAttempts {
			continue
		}
		if err != nil {
			return zero, nil, version, err
		}
		return evolve(state, evs), stored, events.Version(stored), nil
	}
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
