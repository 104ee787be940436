package service_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/services/boot/api"
)

// reportCalls is how many registry commands of type cmd the process made
// and what they answered (ok, or the error's kind).
func (s *stack) reportCalls(cmd, outcome string) float64 {
	s.t.Helper()
	return s.metric(`anvil_command_request_duration_seconds_count{outcome="` + outcome + `",subject="cmd.registry.machine.` + cmd + `"}`)
}

// TestAgentReportIsOneRegistryCommand: an agent's report reaches the
// registry as one command that records the hardware, the reboot indicator
// and the booted revision; a report whose inventory the registry refuses
// is sent again part by part, so that the rest is recorded and the refusal
// is listed in the startup log's problems.
func TestAgentReportIsOneRegistryCommand(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(31), "52-54-00-00-00-31"
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	l := s.bootLife("acme", uuid, mac, enroll)
	base, auth := s.url+"/agent/v1/machines/"+uuid, "Bearer "+l.credential

	whole, hardware := s.reportCalls("report_agent", "ok"), s.reportCalls("report_hardware", "ok")
	r := do(t, http.DefaultClient, http.MethodPost, base+"/report", auth, strings.NewReader(`{"booted_revision":"`+l.mrid+`",`+
		`"hardware":{"cpus":8,"memory_bytes":34359738368,"disks":[{"name":"/dev/vda","size_bytes":1000}],"nics":[{"name":"eth0","mac":"52:54:00:00:00:31"}]},`+
		`"reboot_required":{"required":true,"reason":"linux-image"},"startup_log":["anvil-agent started"]}`))
	if r.status != http.StatusNoContent {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	s.eventually("the report recorded", 10*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && m.CurrentRevision == 1 && m.Hardware != nil && m.Hardware.CPUs == 8 && m.Reboot.Required && m.Reboot.Reason == "linux-image",
			mustJSON(m) + errString(err)
	})
	if got := s.reportCalls("report_agent", "ok") - whole; got != 1 {
		t.Errorf("%v report_agent commands for one report, want 1", got)
	}
	if got := s.reportCalls("report_hardware", "ok") - hardware; got != 0 {
		t.Errorf("%v report_hardware commands besides it, want 0", got)
	}

	// NIC names over 15 bytes and a MAC that is none: the registry refuses
	// the inventory, which the boot service passes on as the agent sent it.
	refused := s.reportCalls("report_agent", "validation")
	r = do(t, http.DefaultClient, http.MethodPost, base+"/report", auth, strings.NewReader(`{"booted_revision":"`+l.mrid+`",`+
		`"hardware":{"cpus":8,"memory_bytes":1024,"nics":[{"name":"`+strings.Repeat("n", 40)+`","mac":"zz"}]},`+
		`"reboot_required":{"required":false},"startup_log":["second report"]}`))
	if r.status != http.StatusNoContent {
		t.Fatalf("report with a refused inventory: %d %s", r.status, r.body)
	}
	if got := s.reportCalls("report_agent", "validation") - refused; got != 1 {
		t.Errorf("%v refused report_agent commands, want 1", got)
	}
	s.eventually("the reboot indicator cleared although the inventory was refused", 10*time.Second, func() (bool, string) {
		m, err := s.machine("acme", uuid)
		return err == nil && !m.Reboot.Required && m.Hardware != nil && m.Hardware.CPUs == 8 && m.Hardware.RAMBytes == 34359738368,
			mustJSON(m) + errString(err)
	})
	logs, err := api.GetStartupLog(s.ctx, s.nc, api.MachineRef{Org: "acme", UUID: uuid})
	if err != nil || len(logs.Lines) != 1 || logs.Lines[0] != "second report" || len(logs.Problems) != 1 ||
		!strings.HasPrefix(logs.Problems[0], "hardware not recorded: ") || !strings.Contains(logs.Problems[0], "nics[0]") {
		t.Fatalf("startup log: %s %v", mustJSON(logs), err)
	}
}
