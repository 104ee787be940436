package app

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/registry/api"
)

// bootReportWorkers bound the boots of one report handled at once: each
// waits on JetStream (its KV write), so a few in flight keep the batch's
// round trips overlapping without taking every core.
const bootReportWorkers = 8

// catchUpWait bounds the wait for the read model to apply an
// organization's latest machine event (milliseconds, unless it lags).
const catchUpWait = 2 * time.Second

// ReportIPXEBoots handles the iPXE boots a boot service answered from
// memory, many machines at once, each as SelfRegister handles it (and
// answered on its own: a refusal of one is that boot's result). What a
// batch saves: one request, each distinct enrollment token verified once,
// the boots' KV writes overlapping, and, per organization, one read of
// the log confirming the read model's copies of its machines instead of
// one per machine.
func (a *App) ReportIPXEBoots(ctx context.Context, r api.ReportIPXEBoots) (api.IPXEBootReports, error) {
	if len(r.Boots) > api.MaxIPXEBootReports {
		return api.IPXEBootReports{}, errs.Invalid("boots", "holds %d boots, at most %d are taken at once", len(r.Boots), api.MaxIPXEBootReports)
	}
	out := api.IPXEBootReports{Results: make([]api.IPXEBootResult, len(r.Boots))}
	tokens := map[string]tokenCheck{}
	for _, b := range r.Boots {
		if _, ok := tokens[b.EnrollmentToken]; !ok {
			p, err := a.VerifyToken(ctx, api.TokenVerify{Token: b.EnrollmentToken, Kind: api.KindEnrollment})
			tokens[b.EnrollmentToken] = tokenCheck{p, err}
		}
	}
	confirms := newOrgConfirms(a)
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(bootReportWorkers, len(r.Boots)) {
		wg.Go(func() {
			for i := range work {
				out.Results[i] = a.reportIPXEBootSafely(ctx, r.Boots[i], tokens[r.Boots[i].EnrollmentToken], confirms)
			}
		})
	}
	for i := range r.Boots {
		work <- i
	}
	close(work)
	wg.Wait()
	return out, nil
}

type tokenCheck struct {
	p   api.Principal
	err error
}

// reportIPXEBootSafely is reportIPXEBoot on a worker goroutine, where the
// command server's recovery does not reach: a panic is that boot's
// internal error, not the registry's end.
func (a *App) reportIPXEBootSafely(ctx context.Context, b api.ReportedIPXEBoot, tok tokenCheck, confirms *orgConfirms) (res api.IPXEBootResult) {
	defer func() {
		if p := recover(); p != nil {
			slog.ErrorContext(ctx, "reporting an iPXE boot panicked", "uuid", b.UUID, "panic", p, "stack", string(debug.Stack()))
			res = api.IPXEBootResult{Error: errs.As(errs.Internal("internal error while reporting the boot of %s", b.UUID))}
		}
	}()
	return a.reportIPXEBoot(ctx, b, tok, confirms)
}

func (a *App) reportIPXEBoot(ctx context.Context, b api.ReportedIPXEBoot, tok tokenCheck, confirms *orgConfirms) api.IPXEBootResult {
	if tok.err != nil {
		return api.IPXEBootResult{Error: errs.As(tok.err)}
	}
	// What the boot appends is the machine's own doing, as when it asks
	// itself (the boot service's SelfRegister names it the same way).
	if events.Actor(ctx) == "" && b.UUID != "" {
		ctx = events.WithActor(ctx, "machine:"+strings.ToLower(b.UUID))
	}
	reply, err := a.selfRegister(ctx, b.SelfRegister, tok.p, confirms.version(tok.p.Org))
	if err != nil {
		return api.IPXEBootResult{Error: errs.As(err)}
	}
	res := api.IPXEBootResult{Version: reply.Version}
	if reply.Version != b.Version || b.Version == 0 || reply.Deleted {
		res.Machine = &reply.Machine
	}
	return res
}

// orgConfirms confirms decisions made on the read model's copies of an
// organization's machines with one read of the log per organization: once
// the read model has applied the organization's latest machine event (as
// the log held it after the batch arrived), every copy of its machines is
// current as of that read, which is what a per-machine read of its
// version would have confirmed.
type orgConfirms struct {
	a  *App
	mu sync.Mutex
	// latest is, per organization, the sequence of its latest machine
	// event once the read model applied it, or false (sync.OnceValues:
	// the read happens once)
	latest map[string]func() (uint64, bool)
}

func newOrgConfirms(a *App) *orgConfirms {
	return &orgConfirms{a: a, latest: map[string]func() (uint64, bool){}}
}

// version is the confirmation of org's machines: the read model's version
// of a machine once it caught up with the log, else App.Versions' read
// (nil: App.Versions as it is).
func (c *orgConfirms) version(org string) versionFunc {
	a := c.a
	if a.Versions == nil || a.WaitMachines == nil || org == "" {
		return nil
	}
	c.mu.Lock()
	latest, ok := c.latest[org]
	if !ok {
		latest = sync.OnceValues(func() (uint64, bool) { return a.machinesCaughtUp(org) })
		c.latest[org] = latest
	}
	c.mu.Unlock()
	return func(ctx context.Context, ref events.AggregateRef) (uint64, error) {
		if ref.Org == org && ref.Type == machineType {
			// The model as it is now, checked again: one rebuilt since
			// (replaying from the start) has not reached it.
			if last, ok := latest(); ok {
				if model := a.Machines.Model(); model.Checkpoint() >= last {
					if m, err := model.Get(ref.Org, ref.ID); err == nil {
						return m.Version, nil
					}
				}
			}
		}
		// Unknown to the read model (a deleted machine's log goes on), or
		// not confirmed at once: its own read.
		return a.Versions.Version(ctx, ref)
	}
}

// machinesCaughtUp reads the sequence of org's latest machine event (one
// read of the log's last message on events.<org>.machine.*) and waits,
// briefly, until the read model has applied it; it returns that sequence.
// False when it cannot tell: each machine is then confirmed by its own
// read.
func (a *App) machinesCaughtUp(org string) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpWait)
	defer cancel()
	last, err := a.Versions.Version(ctx, events.AggregateRef{Org: org, Type: machineType, ID: "*"})
	if err != nil {
		return 0, false
	}
	return last, last == 0 || a.WaitMachines(ctx, last) == nil
}
