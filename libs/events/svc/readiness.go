package svc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ReadySubject is the NATS subject on which a service's replicas say
// whether they are ready: the same checks as their /readyz, asked by the
// services that call them (Runtime.DependsOn). It lies inside the
// service's own cmd.<service>.> namespace, so the NATS permissions that
// let a caller send it commands let it ask this too.
func ReadySubject(service string) string { return "cmd." + service + ".ready" }

// Readiness is a replica's answer on ReadySubject.
type Readiness struct {
	Ready bool `json:"ready"`
	// Failed names each failing check and why, as /readyz prints them.
	Failed map[string]string `json:"failed,omitempty"`
}

// notReadyAnswerDelay holds back a replica's "not ready" answer, so that
// when another replica of the same service is ready, its answer arrives
// first and is the one the caller reads (a request takes the first reply).
const notReadyAnswerDelay = 250 * time.Millisecond

// dependencyTimeout bounds one dependency's readiness question; /readyz
// as a whole has two seconds.
const dependencyTimeout = time.Second

// startedCheck is the name of the check that holds readiness back until
// the service has finished starting (Runtime.Started).
const startedCheck = "started"

// addStartedCheck makes the service not ready from the moment its admin
// listener answers until it calls Started: in between, its projections
// may not be registered as checks yet and its commands not subscribed.
func (rt *Runtime) addStartedCheck() {
	rt.Health.Add(startedCheck, func(context.Context) error {
		if !rt.started.Load() {
			return errors.New("the service is still starting")
		}
		return nil
	})
}

// Started says the service has finished starting: its projections are
// registered as readiness checks and its commands are served. Until then
// /readyz (and ReadySubject, once served) answer "not ready".
func (rt *Runtime) Started() { rt.started.Store(true) }

// ServeReadiness answers ReadySubject(service) from this replica's
// readiness checks, for the services that call this one. Every replica
// answers (no queue group); a ready replica at once, one that is not
// after notReadyAnswerDelay, so that the caller hears "ready" when any
// replica is.
func (rt *Runtime) ServeReadiness() error {
	sub, err := rt.Conn.Subscribe(ReadySubject(rt.Config.Service), func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), dependencyTimeout)
		failed := rt.Health.Ready(ctx)
		cancel()
		data, _ := json.Marshal(Readiness{Ready: len(failed) == 0, Failed: failed})
		if len(failed) == 0 {
			_ = m.Respond(data)
			return
		}
		time.AfterFunc(notReadyAnswerDelay, func() { _ = m.Respond(data) })
	})
	if err != nil {
		return fmt.Errorf("serving %s: %w", ReadySubject(rt.Config.Service), err)
	}
	// The subscription reaches the server before the service says ready.
	if err := rt.Conn.Flush(); err != nil {
		return fmt.Errorf("serving %s: %w", ReadySubject(rt.Config.Service), err)
	}
	rt.closers = append(rt.closers, func(context.Context) error { return sub.Unsubscribe() })
	return nil
}

// DependsOn makes this service ready only while a replica of each named
// service says it is ready: a caller whose dependencies are still
// catching up with the event log would answer 503s (or a stale read)
// while claiming to be ready.
func (rt *Runtime) DependsOn(services ...string) {
	for _, dep := range services {
		rt.Health.Add("service "+dep, func(ctx context.Context) error {
			return askReady(ctx, rt.Conn, dep)
		})
	}
}

// askReady asks ReadySubject(service) and turns the answer into an error
// that says why the service is not ready.
func askReady(ctx context.Context, nc *nats.Conn, service string) error {
	ctx, cancel := context.WithTimeout(ctx, dependencyTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, ReadySubject(service), nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("no replica of %s is running", service)
	case err != nil:
		return fmt.Errorf("%s did not say whether it is ready: %v", service, err)
	}
	var r Readiness
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("%s answered something that is not a readiness: %v", service, err)
	}
	if r.Ready {
		return nil
	}
	reasons := make([]string, 0, len(r.Failed))
	for name, why := range r.Failed {
		reasons = append(reasons, name+": "+why)
	}
	slices.Sort(reasons)
	return fmt.Errorf("%s is not ready (%s)", service, strings.Join(reasons, "; "))
}
