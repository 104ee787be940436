package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

type fixture struct {
	env *eventstest.Env
	svc *service.Service
	c   api.Client
}

func start(t testing.TB, cfg service.Config, h ...service.Hooks) *fixture {
	t.Helper()
	return startOn(t, eventstest.Start(t, app.Registry()), cfg, h...)
}

// startOn starts a registry on env's server: a second one is another
// replica.
func startOn(t testing.TB, env *eventstest.Env, cfg service.Config, h ...service.Hooks) *fixture {
	t.Helper()
	var hooks service.Hooks
	if len(h) > 0 {
		hooks = h[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *service.Service, 1)
	done := make(chan error, 1)
	cfg.Config = svc.Config{Service: "registry", StreamReplicas: 1}
	hooks.Ready = ready
	go func() { done <- service.Start(ctx, cfg, svc.Options{Conn: env.Conn}, hooks) }()
	var s *service.Service
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("registry did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("registry did not start in 30s")
	}
	t.Cleanup(func() { cancel(); <-done })
	return &fixture{env: env, svc: s, c: api.Client{NC: env.Conn}}
}

func (f *fixture) org(t testing.TB, id string) (enroll string) {
	t.Helper()
	ctx := context.Background()
	o, err := f.c.CreateOrg(ctx, api.OrgCreate{ID: id, DisplayName: "Org " + id})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Orgs.WaitFor(ctx, o.Version); err != nil {
		t.Fatal(err)
	}
	tok, err := f.c.IssueToken(ctx, api.TokenIssue{Org: id, Kind: api.KindEnrollment, Name: "rack-1"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitOrg(t, id)
	return tok.Token
}

// waitOrg waits until the org projection holds the org's latest event.
func (f *fixture) waitOrg(t testing.TB, id string) {
	t.Helper()
	envs, err := f.env.Store.Load(context.Background(), events.AggregateRef{Org: id, Type: "org", ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Orgs.WaitFor(context.Background(), events.Version(envs)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) waitMachine(t testing.TB, version uint64) {
	t.Helper()
	if err := f.svc.Machines.WaitFor(context.Background(), version); err != nil {
		t.Fatal(err)
	}
}

// clock is the registry's clock, which a test moves forward instead of
// sleeping.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func uuidN(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i+1) }

func TestSelfRegistrationRaceYieldsOneMachine(t *testing.T) {
	f := start(t, service.Config{})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	const racers = 12
	var wg sync.WaitGroup
	created := make(chan bool, racers)
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: "4C4C4544-0035-4B10-8056-B7C04F4E3532", MAC: "aa:bb:cc:dd:ee:01"})
			if err != nil {
				t.Error(err)
				return
			}
			created <- r.Created
		}()
	}
	wg.Wait()
	close(created)
	n := 0
	for c := range created {
		if c {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d registrations created the machine, want exactly 1", n)
	}
	envs, _ := f.env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: "4c4c4544-0035-4b10-8056-b7c04f4e3532"})
	registered := 0
	for _, e := range envs {
		if e.Type == "machine.registered" {
			registered++
		}
	}
	if registered != 1 {
		t.Fatalf("%d machine.registered events, want 1", registered)
	}
	f.waitMachine(t, events.Version(envs))
	page, err := f.c.ListMachines(ctx, api.MachineList{Org: "acme"})
	if err != nil || len(page.Items) != 1 || page.Items[0].Status != api.StatusReadyUnassigned {
		t.Fatalf("list: %+v %v", page, err)
	}
}

func TestPreRegisteredMachineTakesOverItsConfigurationOnBoot(t *testing.T) {
	f := start(t, service.Config{})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(7)
	_, err := f.c.Machine(ctx, "acme", uuid, machine.PreRegister{UUID: uuid, Hostname: "worker-07", Pool: "workers",
		Labels: map[string]string{"rack": "r1"}, UpgradeIndex: 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:07"})
	if err != nil {
		t.Fatal(err)
	}
	m := r.Machine
	if m.Hostname != "worker-07" || m.Pool != "workers" || m.Labels["rack"] != "r1" || m.UpgradeIndex != 3 || m.MAC != "aa:bb:cc:dd:ee:07" {
		t.Fatalf("booted machine lost its pre-registration: %+v", m)
	}
	if m.Status == api.StatusPreregistered || m.LastIPXEBootAt.IsZero() {
		t.Fatalf("status %s, last boot %v", m.Status, m.LastIPXEBootAt)
	}
	f.waitMachine(t, r.Version)
	got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid})
	if err != nil || got.Machine.Hostname != "worker-07" || got.Version != r.Version {
		t.Fatalf("get: %+v %v", got, err)
	}
}

func TestCommandsOverNATS(t *testing.T) {
	f := start(t, service.Config{})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(1)
	reg, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:01"})
	if err != nil {
		t.Fatal(err)
	}

	// validation: every bad field is named, under "command" for the command body
	_, err = f.c.Machine(ctx, "acme", uuid, machine.SetLabels{Labels: map[string]string{"bad key!": "x", "ok": "white space"}}, 0)
	if e := errs.As(err); e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 2 {
		t.Fatalf("bad labels: %v", err)
	}
	_, err = f.c.Machine(ctx, "ACME!", "not-a-uuid", machine.SetHostname{Hostname: "h"}, 0)
	if e := errs.As(err); e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 2 || e.Fields[0].Field != "org" || e.Fields[1].Field != "uuid" {
		t.Fatalf("bad org and uuid: %+v", err)
	}
	// unknown fields in the command are refused with the field's name
	_, err = rawCommand(f, ctx, "machine.set_hostname", api.MachineRequest{Org: "acme", UUID: uuid, Command: json.RawMessage(`{"hostname":"h","colour":"red"}`)})
	if e := errs.As(err); e == nil || e.Kind != errs.KindValidation || e.Fields[0].Field != "command.colour" {
		t.Fatalf("unknown field: %+v", err)
	}
	// not found
	_, err = f.c.Machine(ctx, "acme", uuidN(99), machine.SetHostname{Hostname: "h"}, 0)
	if !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("unknown machine: %v", err)
	}
	// conflict: a machine being deleted cannot be assigned. It needs a node
	// for a graceful delete to have something to drain.
	for _, c := range []machine.Command{machine.AssignToPool{Pool: "workers"}, machine.SetTargetRevision{Revision: 1}} {
		if _, err := f.c.Machine(ctx, "acme", uuid, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	del, err := f.c.Machine(ctx, "acme", uuid, machine.Delete{Policy: machine.DeletionPolicy("graceful")}, 0)
	if err != nil || del.Machine.Status != api.StatusDeleting {
		t.Fatalf("graceful delete: %+v %v", del.Machine, err)
	}
	_, err = f.c.Machine(ctx, "acme", uuid, machine.AssignToPool{Pool: "other"}, 0)
	if e := errs.As(err); e == nil || e.Kind != errs.KindConflict || e.Message == "" {
		t.Fatalf("assign while deleting: %v", err)
	}
	t.Logf("conflict says: %s", errs.As(err).Message)
	// precondition: a stale expected version
	_, err = f.c.Machine(ctx, "acme", uuid, machine.AbortDeletion{}, reg.Version)
	if !errs.Is(err, errs.KindPrecondition) {
		t.Fatalf("stale version: %v", err)
	}
	// an expected version of a machine that does not exist: not found, as
	// without it (docs/api.md, Settled); 412 only when the command would act
	_, err = f.c.Machine(ctx, "acme", uuidN(98), machine.SetHostname{Hostname: "h"}, reg.Version)
	if !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("expected version of a missing machine: %v", err)
	}
	_, err = f.c.Machine(ctx, "acme", uuidN(98), machine.PreRegister{UUID: uuidN(98)}, reg.Version)
	if !errs.Is(err, errs.KindPrecondition) {
		t.Fatalf("expected version of a machine a pre-registration would create: %v", err)
	}
}

// withoutTimes is the machine's state: what the log folds into, without
// the times kept beside it (created, updated, last seen).
func withoutTimes(m api.Machine) api.Machine {
	m.CreatedAt, m.UpdatedAt, m.LastSeen = time.Time{}, time.Time{}, time.Time{}
	return m
}

func rawCommand(f *fixture, ctx context.Context, cmdType string, r api.MachineRequest) (api.MachineReply, error) {
	return command.Call[api.MachineRequest, api.MachineReply](ctx, f.env.Conn, api.MachineSubject(cmdType), r)
}

func TestTimeTravelMatchesWhatTheProjectionShowedThen(t *testing.T) {
	f := start(t, service.Config{})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(3)
	r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:03"})
	if err != nil {
		t.Fatal(err)
	}
	type snap struct {
		at      time.Time
		version uint64
		m       api.Machine
	}
	var snaps []snap
	take := func(version uint64) {
		f.waitMachine(t, version)
		got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		snaps = append(snaps, snap{at: time.Now(), version: got.Version, m: got.Machine})
		time.Sleep(5 * time.Millisecond)
	}
	take(r.Version)
	steps := []machine.Command{
		machine.SetHostname{Hostname: "alpha"},
		machine.SetLabels{Labels: map[string]string{"env": "prod"}},
		machine.AssignToPool{Pool: "workers"},
		machine.SetHostname{Hostname: "beta"},
	}
	for _, c := range steps {
		rep, err := f.c.Machine(ctx, "acme", uuid, c, 0)
		if err != nil {
			t.Fatal(err)
		}
		take(rep.Version)
	}
	for i, s := range snaps {
		for _, at := range []string{s.at.Format(time.RFC3339Nano), fmt.Sprint(s.version)} {
			got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid, At: at})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(withoutTimes(s.m))
			have, _ := json.Marshal(withoutTimes(got.Machine))
			if string(want) != string(have) || got.Version != s.version {
				t.Errorf("snapshot %d at %s:\n got %s (v%d)\nwant %s (v%d)", i, at, have, got.Version, want, s.version)
			}
		}
	}
	_, err = f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid, At: "yesterday"})
	if e := errs.As(err); e == nil || e.Fields[0].Field != "at" {
		t.Fatalf("bad at: %v", err)
	}
}

func TestOrganizationIsolation(t *testing.T) {
	f := start(t, service.Config{})
	enrollA := f.org(t, "org-a")
	enrollB := f.org(t, "org-b")
	ctx := context.Background()
	ra, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enrollA, UUID: uuidN(1), MAC: "aa:bb:cc:dd:ee:01"})
	if err != nil || ra.Machine.Org != "org-a" {
		t.Fatalf("register into a: %+v %v", ra, err)
	}
	rb, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enrollB, UUID: uuidN(2), MAC: "aa:bb:cc:dd:ee:02"})
	if err != nil || rb.Machine.Org != "org-b" {
		t.Fatalf("register into b: %+v %v", rb, err)
	}
	f.waitMachine(t, max(ra.Version, rb.Version))

	// org A's identity never sees or changes org B's machine
	if _, err := f.c.GetMachine(ctx, api.MachineGet{Org: "org-a", UUID: uuidN(2)}); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("a read b's machine: %v", err)
	}
	if _, err := f.c.GetMachine(ctx, api.MachineGet{Org: "org-a", UUID: uuidN(2), At: "1"}); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("a time-travelled into b's machine: %v", err)
	}
	if _, err := f.c.Machine(ctx, "org-a", uuidN(2), machine.SetHostname{Hostname: "stolen"}, 0); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("a changed b's machine: %v", err)
	}
	page, err := f.c.ListMachines(ctx, api.MachineList{Org: "org-a"})
	if err != nil || len(page.Items) != 1 || page.Items[0].UUID != uuidN(1) {
		t.Fatalf("a's list: %+v %v", page, err)
	}
	// the same UUID in two orgs is two machines
	if _, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enrollA, UUID: uuidN(2), MAC: "aa:bb:cc:dd:ee:02"}); err != nil {
		t.Fatal(err)
	}
	got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "org-b", UUID: uuidN(2), At: fmt.Sprint(rb.Version)})
	if err != nil || got.Machine.Org != "org-b" {
		t.Fatalf("b's machine: %+v %v", got, err)
	}
	// tokens: b's token never lists or revokes in a
	tokens, err := f.c.ListTokens(ctx, api.TokenListReq{Org: "org-a"})
	if err != nil || len(tokens.Items) != 1 {
		t.Fatalf("a's tokens: %+v %v", tokens, err)
	}
	bTokens, _ := f.c.ListTokens(ctx, api.TokenListReq{Org: "org-b"})
	if _, err := f.c.RevokeToken(ctx, api.TokenRevoke{Org: "org-a", TokenID: bTokens.Items[0].ID}); err == nil {
		t.Fatal("org a revoked org b's token")
	}
}

func TestTokensVerifyExpireAndRevoke(t *testing.T) {
	clk := &clock{}
	f := start(t, service.Config{}, service.Hooks{Now: clk.now})
	f.org(t, "acme")
	ctx := context.Background()
	issued, err := f.c.IssueToken(ctx, api.TokenIssue{Org: "acme", Kind: api.KindAPI, Name: "ci", Role: api.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	f.waitOrg(t, "acme")
	p, err := f.c.VerifyToken(ctx, api.TokenVerify{Token: issued.Token, Kind: api.KindAPI})
	if err != nil || p.Org != "acme" || p.Role != api.RoleOperator || p.Actor() != "token:"+issued.Info.ID+" (ci)" {
		t.Fatalf("verify: %+v %v", p, err)
	}
	// the log holds the hash, never the plaintext
	envs, _ := f.env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "org", ID: "acme"})
	for _, e := range envs {
		if containsBytes(e.Payload, issued.Token) || containsBytes(e.Payload, issued.Token[len(issued.Token)-20:]) {
			t.Fatalf("event %s holds the token's plaintext", e.Type)
		}
	}
	if _, err := f.c.VerifyToken(ctx, api.TokenVerify{Token: issued.Token, Kind: api.KindEnrollment}); !errs.Is(err, errs.KindUnauthorized) {
		t.Fatalf("wrong kind: %v", err)
	}
	tampered := []byte(issued.Token)
	mid := len(tampered) - 10
	if tampered[mid] == 'a' {
		tampered[mid] = 'b'
	} else {
		tampered[mid] = 'a'
	}
	if _, err := f.c.VerifyToken(ctx, api.TokenVerify{Token: string(tampered), Kind: api.KindAPI}); !errs.Is(err, errs.KindUnauthorized) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := f.c.RevokeToken(ctx, api.TokenRevoke{Org: "acme", TokenID: issued.Info.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitOrg(t, "acme")
	if _, err := f.c.VerifyToken(ctx, api.TokenVerify{Token: issued.Token, Kind: api.KindAPI}); !errs.Is(err, errs.KindUnauthorized) {
		t.Fatalf("revoked token verified: %v", err)
	}
	// an expired enrollment token registers nothing: it registers until
	// the registry's clock passes its expiry
	exp, err := f.c.IssueToken(ctx, api.TokenIssue{Org: "acme", Kind: api.KindEnrollment, ExpiresAt: clk.now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	f.waitOrg(t, "acme")
	if _, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: exp.Token, UUID: uuidN(6), MAC: "aa:bb:cc:dd:ee:06"}); err != nil {
		t.Fatalf("enrollment token before its expiry: %v", err)
	}
	clk.advance(time.Hour)
	if _, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: exp.Token, UUID: uuidN(5), MAC: "aa:bb:cc:dd:ee:05"}); !errs.Is(err, errs.KindUnauthorized) {
		t.Fatalf("expired enrollment token: %v", err)
	}
	if envs, _ := f.env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: uuidN(5)}); len(envs) != 0 {
		t.Fatal("an expired token registered a machine")
	}
}

func TestHeartbeatsAreNotEventsAndSilenceMakesOffline(t *testing.T) {
	// Silence is the registry's clock moving past OfflineAfter, not time
	// passing: a slow machine cannot make heartbeats look silent.
	clk := &clock{}
	f := start(t, service.Config{OfflineAfter: time.Hour, SweepInterval: 50 * time.Millisecond}, service.Hooks{Now: clk.now})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(4)
	r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:04"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitMachine(t, r.Version)
	head := func() uint64 { h, _ := f.env.Store.Head(ctx); return h }
	if err := f.c.Heartbeat(ctx, api.Heartbeat{Org: "acme", UUID: uuid}); err != nil {
		t.Fatal(err)
	}
	afterOnline := head()
	for range 5 {
		if err := f.c.Heartbeat(ctx, api.Heartbeat{Org: "acme", UUID: uuid}); err != nil {
			t.Fatal(err)
		}
	}
	if head() != afterOnline {
		t.Fatal("heartbeats of an online machine appended events")
	}
	waitFor := func(want api.Connectivity) {
		t.Helper()
		eventstest.Eventually(t, "machine "+string(want), 20*time.Second, 20*time.Millisecond, func() (bool, string) {
			got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid})
			return err == nil && got.Machine.Connectivity == want, fmt.Sprintf("%s %v", got.Machine.Connectivity, err)
		})
	}
	waitFor(api.Online)
	clk.advance(2 * time.Hour) // silence
	waitFor(api.Offline)
	if err := f.c.Heartbeat(ctx, api.Heartbeat{Org: "acme", UUID: uuid}); err != nil {
		t.Fatal(err)
	}
	waitFor(api.Online)
	var kinds []string
	envs, _ := f.env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: uuid})
	for _, e := range envs {
		if e.Type == "machine.went_offline" || e.Type == "machine.came_online" {
			kinds = append(kinds, e.Type)
		}
	}
	if fmt.Sprint(kinds) != "[machine.came_online machine.went_offline machine.came_online]" {
		t.Fatalf("connectivity events: %v", kinds)
	}
}

func containsBytes(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }
