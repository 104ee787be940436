package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	revapi "github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/rollout/domain/rollout"
)

// poolMachines is a registry that answers the pool's machines with err.
type poolMachines struct {
	Registry
	err error
}

func (r poolMachines) PoolMachines(context.Context, string, string) ([]regapi.Machine, error) {
	return nil, r.err
}

// noRollouts is a read model without rollouts.
type noRollouts struct{ Rollouts }

func (noRollouts) Get(string, string) (Snapshot, bool)            { return Snapshot{}, false }
func (noRollouts) Active() []Snapshot                             { return nil }
func (noRollouts) Peek(string, string, func(*rollout.State)) bool { return false }
func (noRollouts) PeekActive(func(string, *rollout.State) bool)   {}

// An apply whose rollout cannot start for good is recorded as refused,
// once; what retrying may fix is returned to the handler and records
// nothing.
func TestStartFromApplyRefusesOrRetries(t *testing.T) {
	good := revapi.ApplyRequested{Pool: "web", Cluster: "c1", Revision: 2, RequestedBy: "token:t1", RolloutID: "ro-1",
		Rollout: revapi.Rollout{MaxUnavailable: "1"}}
	badStrategy := good
	badStrategy.Rollout.DrainTimeout = "1ms"
	unreadable := good
	unreadable.Rollout.Pause = "soon"
	noRevision := good
	noRevision.Revision = 0
	badID := badStrategy
	badID.RolloutID = "bad id"
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name     string
		ctx      context.Context
		registry error
		apply    revapi.ApplyRequested
		wantErr  errs.Kind // "" for none
		want     string    // the rollout's one event, and a part of its reason
	}{
		{"starts", nil, nil, good, "", "rollout.started"},
		{"registry unavailable", nil, errs.Unavailable("no service answers"), good, errs.KindUnavailable, ""},
		{"registry rate-limited", nil, errs.RateLimited(time.Second, "slow down"), good, errs.KindRateLimited, ""},
		{"stopping", cancelled, errs.Invalid("pool", "bad"), good, errs.KindValidation, ""},
		{"registry refuses", nil, errs.Invalid("pool", "must be a DNS label"), good, "", "rollout.start_refused: pool: must be a DNS label"},
		{"registry fails", nil, errors.New("decoding the reply"), good, "", "rollout.start_refused: decoding the reply"},
		{"the strategy breaks the rules", nil, nil, badStrategy, "", "rollout.start_refused: strategy.drain_timeout"},
		{"settings that do not read", nil, nil, unreadable, "", "rollout.start_refused: reading the pool's rollout settings: pause"},
		{"no revision", nil, nil, noRevision, "", "rollout.start_refused: revision: must be 1 or more"},
		{"an id that names no rollout", nil, nil, badID, errs.KindValidation, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := events.NewRegistry()
			reg.RegisterAll(rollout.EventTypes())
			store := events.NewMemoryStore(reg)
			a := &App{Store: store, Events: reg, Registry: poolMachines{err: tc.registry}, Rollouts: noRollouts{},
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			a.Defaults()
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			env := &events.Envelope{ID: "ev-1", Org: "acme"}
			err := a.StartFromApply(ctx, env, tc.apply)
			if errs.KindOf(err) != tc.wantErr && (err != nil || tc.wantErr != "") {
				t.Fatalf("error %v (%s), want kind %q", err, errs.KindOf(err), tc.wantErr)
			}
			if tc.want == "" && err == nil {
				t.Fatal("no error and nothing expected")
			}
			// A redelivery changes nothing that the first delivery did.
			if err == nil {
				if err := a.StartFromApply(ctx, env, tc.apply); err != nil {
					t.Fatalf("redelivery: %v", err)
				}
			}
			var got []events.Envelope
			if tc.apply.RolloutID != "bad id" {
				if got, err = store.Load(context.Background(), ref("acme", tc.apply.RolloutID)); err != nil {
					t.Fatal(err)
				}
			}
			typ, reason, _ := strings.Cut(tc.want, ": ")
			switch {
			case typ == "" && len(got) != 0:
				t.Fatalf("a start that may be retried recorded %d events", len(got))
			case typ == "":
			case len(got) != 1 || got[0].Type != typ:
				t.Fatalf("events %+v, want one %s", got, typ)
			case reason != "":
				var s rollout.State
				p, err := reg.Decode(&got[0])
				if err != nil {
					t.Fatal(err)
				}
				s.Apply(p)
				if !s.Refused || s.Status() != rollout.StatusFailed || !strings.HasPrefix(s.Reason, "cannot start: ") ||
					!strings.Contains(s.Reason, reason) || s.Pool != "web" || s.RequestedBy != "token:t1" {
					t.Errorf("refused rollout %+v, want the reason to name %q", s, reason)
				}
			}
		})
	}
}
