package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/domain/machine"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

// countEvents counts a machine's events of one type in the log.
func (f *fixture) countEvents(t testing.TB, org, uuid, eventType string) int {
	t.Helper()
	envs, err := f.env.Store.Load(context.Background(), events.AggregateRef{Org: org, Type: "machine", ID: uuid})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range envs {
		if e.Type == eventType {
			n++
		}
	}
	return n
}

// A machine waiting in its iPXE loop asks again and again; within the
// interval, its retries append nothing, while every answer and every read
// shows its latest boot, on every replica.
func TestIPXERetriesOfAWaitingMachineAppendOneEventPerInterval(t *testing.T) {
	const every = 10 * time.Minute
	f := start(t, service.Config{IPXERecordInterval: every})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(21)
	t0 := time.Now().UTC().Truncate(time.Second)
	boot := func(at time.Time, retryIn time.Duration) api.SelfRegisterReply {
		t.Helper()
		r, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:21", At: at, RetryIn: retryIn})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Machine.LastIPXEBootAt.Equal(at) || !r.Machine.IPXERetryBy.Equal(at.Add(retryIn)) {
			t.Fatalf("boot at %v: the answer shows %v / %v", at, r.Machine.LastIPXEBootAt, r.Machine.IPXERetryBy)
		}
		return r
	}
	first := boot(t0, 5*time.Minute)
	if !first.Created {
		t.Fatal("the first boot registers the machine")
	}
	f.waitMachine(t, first.Version)

	// N retries within the interval, with the boot service's jitter
	const n = 20
	var last time.Time
	for i := 1; i <= n; i++ {
		last = t0.Add(time.Duration(i) * 25 * time.Second)
		r := boot(last, []time.Duration{4 * time.Minute, 5 * time.Minute, 6 * time.Minute}[i%3])
		if r.Created || r.Version != first.Version || len(r.Events) != 0 {
			t.Fatalf("retry %d appended %v (version %d, was %d)", i, r.Events, r.Version, first.Version)
		}
	}
	if got := f.countEvents(t, "acme", uuid, "machine.ipxe_booted"); got != 1 {
		t.Fatalf("%d retries left %d machine.ipxe_booted events, want 1", n, got)
	}
	got, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid})
	if err != nil || !got.Machine.LastIPXEBootAt.Equal(last) || got.Version != first.Version {
		t.Fatalf("get: last boot %v (want %v), version %d: %v", got.Machine.LastIPXEBootAt, last, got.Version, err)
	}
	page, err := f.c.ListMachines(ctx, api.MachineList{Org: "acme"})
	if err != nil || len(page.Items) != 1 || !page.Items[0].LastIPXEBootAt.Equal(last) {
		t.Fatalf("list: %+v %v", page, err)
	}
	// the log's own history (time travel) has the recorded boot only
	old, err := f.c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid, At: fmt.Sprint(first.Version)})
	if err != nil || !old.Machine.LastIPXEBootAt.Equal(t0) {
		t.Fatalf("as of the registration: %v %v", old.Machine.LastIPXEBootAt, err)
	}

	// another replica, started now, shows the latest boot too (it reads
	// the KV bucket, not the log)
	second := startOn(t, f.env, service.Config{IPXERecordInterval: every})
	eventstest.Eventually(t, "the second replica shows the latest boot", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		m, err := second.svc.App.Machines.Model().Get("acme", uuid)
		return err == nil && m.Shown().LastIPXEBootAt.Equal(last), fmt.Sprintf("%v %v", m.Shown().LastIPXEBootAt, err)
	})

	// once the interval has passed, one more boot is recorded
	r := boot(t0.Add(every), 5*time.Minute)
	if len(r.Events) != 1 || r.Events[0] != "machine.ipxe_booted" || r.Version == first.Version {
		t.Fatalf("the boot after the interval: %v", r.Events)
	}
	f.waitMachine(t, r.Version)
	// and so is the first boot after anything else happened
	assigned, err := f.c.Machine(ctx, "acme", uuid, machine.AssignToPool{Pool: "workers"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.waitMachine(t, assigned.Version)
	if r := boot(t0.Add(every+time.Minute), 5*time.Minute); len(r.Events) != 1 {
		t.Fatalf("the boot after an assignment: %v", r.Events)
	}
	if got := f.countEvents(t, "acme", uuid, "machine.ipxe_booted"); got != 3 {
		t.Fatalf("%d machine.ipxe_booted events, want 3", got)
	}
}

// With a negative interval every boot is recorded, as before.
func TestIPXEBootsAllRecordedWhenAsked(t *testing.T) {
	f := start(t, service.Config{IPXERecordInterval: -1})
	enroll := f.org(t, "acme")
	uuid := uuidN(22)
	t0 := time.Now().UTC()
	for i := range 3 {
		if _, err := f.c.SelfRegister(context.Background(), api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:22",
			At: t0.Add(time.Duration(i) * time.Second), RetryIn: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.countEvents(t, "acme", uuid, "machine.ipxe_booted"); got != 3 {
		t.Fatalf("%d machine.ipxe_booted events, want 3", got)
	}
}

// issueEnroll issues an enrollment token with a cap.
func (f *fixture) issueEnroll(t testing.TB, org string, max int) api.TokenIssued {
	t.Helper()
	tok, err := f.c.IssueToken(context.Background(), api.TokenIssue{Org: org, Kind: api.KindEnrollment, Name: "rack-9", MaxMachines: max})
	if err != nil {
		t.Fatal(err)
	}
	f.waitOrg(t, org)
	return tok
}

func TestEnrollmentTokenMaxMachines(t *testing.T) {
	f := start(t, service.Config{})
	f.org(t, "acme")
	ctx := context.Background()
	tok := f.issueEnroll(t, "acme", 2)
	if tok.Info.MaxMachines != 2 || tok.Info.RegisteredMachines == nil || *tok.Info.RegisteredMachines != 0 {
		t.Fatalf("issued: %+v", tok.Info)
	}
	register := func(i int) (api.SelfRegisterReply, error) {
		return f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: tok.Token, UUID: uuidN(100 + i), MAC: "aa:bb:cc:dd:ee:ff"})
	}
	var version uint64
	for i := range 2 {
		r, err := register(i)
		if err != nil || !r.Created {
			t.Fatalf("machine %d: %+v %v", i, r, err)
		}
		version = r.Version
	}
	f.waitMachine(t, version)
	_, err := register(2)
	e := errs.As(err)
	if e == nil || e.Kind != errs.KindForbidden || !strings.Contains(e.Message, "max_machines is 2") || !strings.Contains(e.Message, tok.Info.ID+" (rack-9)") {
		t.Fatalf("the third machine: %v", err)
	}
	t.Logf("the refusal reads: %s", e.Message)
	if n := f.countEvents(t, "acme", uuidN(102), "machine.registered"); n != 0 {
		t.Fatal("a machine over the cap was registered")
	}
	// the machines it registered still boot
	if r, err := register(0); err != nil || r.Created {
		t.Fatalf("a registered machine boots again: %+v %v", r, err)
	}
	// a pre-registered machine that boots with the token is a registration
	if _, err := f.c.Machine(ctx, "acme", uuidN(103), machine.PreRegister{UUID: uuidN(103)}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := register(3); !errs.Is(err, errs.KindForbidden) {
		t.Fatalf("a pre-registered machine over the cap: %v", err)
	}
	list, err := f.c.ListTokens(ctx, api.TokenListReq{Org: "acme", Kind: api.KindEnrollment})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		if it.ID == tok.Info.ID && (it.MaxMachines != 2 || it.RegisteredMachines == nil || *it.RegisteredMachines != 2) {
			t.Fatalf("listed as %+v", it)
		}
	}
	// validation names the field
	for _, tc := range []api.TokenIssue{
		{Org: "acme", Kind: api.KindEnrollment, MaxMachines: -1},
		{Org: "acme", Kind: api.KindAPI, Role: "viewer", MaxMachines: 3},
	} {
		_, err := f.c.IssueToken(ctx, tc)
		if e := errs.As(err); e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 1 || e.Fields[0].Field != "max_machines" {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
}

// Concurrent registrations never exceed the cap, on two replicas.
func TestEnrollmentCapHoldsUnderConcurrency(t *testing.T) {
	f := start(t, service.Config{})
	f.org(t, "acme")
	second := startOn(t, f.env, service.Config{})
	tok := f.issueEnroll(t, "acme", 3)
	second.waitOrg(t, "acme")
	const racers = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.c.SelfRegister(context.Background(), api.SelfRegister{EnrollmentToken: tok.Token, UUID: uuidN(200 + i), MAC: "aa:bb:cc:dd:ee:ff"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && r.Created:
				created++
			case errs.Is(err, errs.KindForbidden):
				refused++
			default:
				t.Errorf("racer %d: %+v %v", i, r, err)
			}
		}()
	}
	wg.Wait()
	if created != 3 || refused != racers-3 {
		t.Fatalf("%d registered and %d refused, want 3 and %d", created, refused, racers-3)
	}
}

// A token's registrations are limited in rate; boots of its machines are not.
func TestEnrollmentRateLimit(t *testing.T) {
	f := start(t, service.Config{EnrollmentRate: 0.001, EnrollmentBurst: 2}) // 2 at once, then one per 1000 s
	enroll := f.org(t, "acme")
	ctx := context.Background()
	register := func(i int) (api.SelfRegisterReply, error) {
		return f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuidN(300 + i), MAC: "aa:bb:cc:dd:ee:ff"})
	}
	var version uint64
	for i := range 2 {
		r, err := register(i)
		if err != nil || !r.Created {
			t.Fatalf("machine %d: %v", i, err)
		}
		version = r.Version
	}
	f.waitMachine(t, version)
	_, err := register(2)
	e := errs.As(err)
	if e == nil || e.Kind != errs.KindRateLimited || e.RetryAfter != 1000 || !strings.Contains(e.Message, "retry in 16m40s") || !strings.Contains(e.Message, "0.001 machines per second (2 at once)") {
		t.Fatalf("the third registration: %v", err)
	}
	t.Logf("the refusal reads: %s", e.Message)
	for i := range 2 {
		if r, err := register(i); err != nil || r.Created {
			t.Fatalf("machine %d boots again: %v", i, err)
		}
	}
	// the race of one machine's boots takes one place only
	f2 := start(t, service.Config{EnrollmentRate: 0.001, EnrollmentBurst: 2})
	enroll2 := f2.org(t, "acme")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f2.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll2, UUID: uuidN(400), MAC: "aa:bb:cc:dd:ee:ff"}); err != nil && !errs.Is(err, errs.KindRateLimited) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	r, err := f2.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll2, UUID: uuidN(401), MAC: "aa:bb:cc:dd:ee:ff"})
	if err != nil || !r.Created {
		t.Fatalf("one machine's racing boots used up the token's rate: %v", err)
	}
}

// A forced deletion answers with the machine as it last was.
func TestDeletionAnswersTheMachineAsItWas(t *testing.T) {
	f := start(t, service.Config{})
	enroll := f.org(t, "acme")
	ctx := context.Background()
	uuid := uuidN(31)
	reg, err := f.c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: enroll, UUID: uuid, MAC: "aa:bb:cc:dd:ee:31"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Machine(ctx, "acme", uuid, machine.SetHostname{Hostname: "w31"}, 0); err != nil {
		t.Fatal(err)
	}
	del, err := f.c.Machine(ctx, "acme", uuid, machine.Delete{Policy: machine.DeletionForced}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !del.Deleted || del.Machine.UUID != uuid || del.Machine.Hostname != "w31" || del.Machine.Status != api.StatusReadyUnassigned ||
		del.Version <= reg.Version || len(del.Events) != 1 || del.Events[0] != "machine.deleted" {
		t.Fatalf("forced delete answered %+v", del)
	}
	if _, err := f.c.Machine(ctx, "acme", uuid, machine.Delete{Policy: machine.DeletionForced}, 0); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
}
