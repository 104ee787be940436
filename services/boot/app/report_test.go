package app

import (
	"context"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// TestWholeReportAnswersThatGoPartByPart: a report goes part by part when
// the registry refused it or serves no report_agent (an older registry,
// during an upgrade: the call's real answer from a NATS server on which no
// one serves the subject), and fails when the registry is down or the
// machine is gone.
func TestWholeReportAnswersThatGoPartByPart(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, noResponder := command.Call[regapi.MachineRequest, regapi.MachineReply](ctx, env.Conn,
		regapi.MachineSubject(regapi.ReportAgent{}.CommandType()), regapi.MachineRequest{Org: "acme", UUID: "x"})
	if !command.IsNoResponder(noResponder) || !unavailable(noResponder) {
		t.Fatalf("a call no one serves answered %v", noResponder)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{noResponder, true},
		{errs.Invalid("hardware.hardware.nics[0].mac", "is not a MAC address"), true},
		{errs.Conflict("machine x cannot report hardware: it must self-register first"), true},
		{errs.Internal("boom"), true},
		{errs.Unavailable("no answer from cmd.registry.machine.report_agent in 5s"), false},
		{errs.NotFound("machine x does not exist"), false},
	} {
		if got := partByPart(c.err); got != c.want {
			t.Errorf("partByPart(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
