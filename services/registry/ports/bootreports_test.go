package ports_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/registry/api"
	"github.com/anvil-fleet/anvil/services/registry/app"
	"github.com/anvil-fleet/anvil/services/registry/service"
)

// A batch of iPXE boots over NATS: each boot is handled as its own
// SelfRegister (recorded in last_ipxe_boot_at, a new machine registered
// as itself), answered on its own (a refusal is that boot's result), and
// the machine is left out of a result whose version the report named.
func TestReportIPXEBoots(t *testing.T) {
	env := eventstest.Start(t, app.Registry())
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan *service.Service, 1), make(chan error, 1)
	go func() {
		done <- service.Start(ctx, service.Config{Config: svc.Config{Service: "registry", StreamReplicas: 1}},
			svc.Options{Conn: env.Conn, Logger: slog.New(slog.DiscardHandler)}, service.Hooks{Ready: ready})
	}()
	var reg *service.Service
	select {
	case reg = <-ready:
	case err := <-done:
		t.Fatalf("registry did not start: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })
	c := api.Client{NC: env.Conn}
	if o, err := c.CreateOrg(ctx, api.OrgCreate{ID: "acme", DisplayName: "Acme"}); err != nil {
		t.Fatal(err)
	} else if err := reg.Orgs.WaitFor(ctx, o.Version); err != nil {
		t.Fatal(err)
	}
	tok, err := c.IssueToken(ctx, api.TokenIssue{Org: "acme", Kind: api.KindEnrollment, Name: "rack-1"})
	if err != nil {
		t.Fatal(err)
	}
	eventstest.Eventually(t, "the token verifies", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		_, err := c.VerifyToken(ctx, api.TokenVerify{Token: tok.Token, Kind: api.KindEnrollment})
		return err == nil, fmt.Sprint(err)
	})
	uuid := func(i int) string { return fmt.Sprintf("4c4c4544-0035-4b10-8056-%012x", i+1) }
	// Registered, then booted again: its last event is a recorded boot,
	// so that the next boots are not due in the log (IPXEBootDue).
	var known api.SelfRegisterReply
	for range 2 {
		if known, err = c.SelfRegister(ctx, api.SelfRegister{EnrollmentToken: tok.Token, UUID: uuid(0), MAC: "52:54:00:00:00:01"}); err != nil {
			t.Fatal(err)
		}
		if err := reg.Machines.WaitFor(ctx, known.Version); err != nil {
			t.Fatal(err)
		}
	}

	at := time.Now().Add(time.Minute).UTC()
	boot := func(i int, version uint64) api.ReportedIPXEBoot {
		return api.ReportedIPXEBoot{Version: version,
			SelfRegister: api.SelfRegister{EnrollmentToken: tok.Token, UUID: uuid(i), MAC: fmt.Sprintf("52:54:00:00:00:%02x", i+1), At: at}}
	}
	badToken := boot(2, 0)
	badToken.EnrollmentToken = "anvil_enroll_nope"
	badUUID := boot(3, 0)
	badUUID.UUID = "not-a-uuid"
	rep, err := c.ReportIPXEBoots(ctx, api.ReportIPXEBoots{Boots: []api.ReportedIPXEBoot{
		boot(0, known.Version), // known, unchanged (its boot not due in the log)
		boot(1, 0),             // unknown: registers itself
		badToken, badUUID,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 4 {
		t.Fatalf("results %+v", rep.Results)
	}
	if r := rep.Results[0]; r.Error != nil || r.Machine != nil || r.Version != known.Version {
		t.Errorf("unchanged machine: %+v, want version %d without the machine", r, known.Version)
	}
	if r := rep.Results[1]; r.Error != nil || r.Machine == nil || r.Machine.UUID != uuid(1) || r.Version == 0 {
		t.Errorf("new machine: %+v", r)
	} else {
		envs, err := env.Store.Load(ctx, events.AggregateRef{Org: "acme", Type: "machine", ID: uuid(1)})
		if err != nil || len(envs) == 0 || envs[0].Actor != "machine:"+uuid(1) {
			t.Errorf("the new machine's events %+v (%v), want them by machine:%s", envs, err, uuid(1))
		}
	}
	if r := rep.Results[2]; r.Error == nil || r.Error.Kind != errs.KindUnauthorized {
		t.Errorf("bad token: %+v", r)
	}
	if r := rep.Results[3]; r.Error == nil || r.Error.Kind != errs.KindValidation || len(r.Error.Fields) == 0 || r.Error.Fields[0].Field != "uuid" {
		t.Errorf("bad UUID: %+v", r.Error)
	}
	for i := range 2 {
		m, err := c.GetMachine(ctx, api.MachineGet{Org: "acme", UUID: uuid(i)})
		if err != nil || !m.Machine.LastIPXEBootAt.Equal(at) {
			t.Errorf("machine %d's last iPXE boot %v (%v), want %v", i, m.Machine.LastIPXEBootAt, err, at)
		}
	}

	// Too many at once: refused as a whole, naming the field.
	_, err = c.ReportIPXEBoots(ctx, api.ReportIPXEBoots{Boots: make([]api.ReportedIPXEBoot, api.MaxIPXEBootReports+1)})
	if e := errs.As(err); e.Kind != errs.KindValidation || len(e.Fields) != 1 || e.Fields[0].Field != "boots" ||
		!strings.Contains(e.Fields[0].Reason, fmt.Sprint(api.MaxIPXEBootReports)) {
		t.Errorf("an oversized batch: %v", err)
	}
}
