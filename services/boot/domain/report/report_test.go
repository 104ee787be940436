package report

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

func TestHardware(t *testing.T) {
	got, err := Hardware(agentapi.Hardware{
		CPUs: 16, MemoryBytes: 67441164288,
		Disks: []agentapi.Disk{{Name: "nvme0n1", SizeBytes: 1920383410176, Model: "SAMSUNG", Rotational: false}},
		NICs:  []agentapi.NIC{{Name: "eno1", MAC: "aa:bb:cc:dd:ee:01", SpeedMbps: 25000}},
	})
	want := regapi.Hardware{CPUs: 16, RAMBytes: 67441164288,
		Disks: []regapi.Disk{{Name: "nvme0n1", SizeBytes: 1920383410176}},
		NICs:  []regapi.NIC{{Name: "eno1", MAC: "aa:bb:cc:dd:ee:01"}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
	}
	if _, err := Hardware(agentapi.Hardware{Disks: []agentapi.Disk{}, NICs: []agentapi.NIC{}}); err == nil {
		t.Error("an empty inventory was mapped")
	}
}

func TestTexts(t *testing.T) {
	if RebootReason(agentapi.RebootRequired{Required: false, Reason: "x"}) != "" {
		t.Error("reason kept without a required reboot")
	}
	r := RebootReason(agentapi.RebootRequired{Required: true, Reason: strings.Repeat("ü", 2000)})
	if len(r) > regapi.MaxReasonLen || !utf8.ValidString(r) {
		t.Errorf("reason %d bytes", len(r))
	}
	lines := make([]string, 500)
	for i := range lines {
		lines[i] = strings.Repeat("x", 5000) + "\xff"
	}
	got := StartupLog(lines)
	if len(got) != MaxLogLines || len(got[0]) > MaxLogLine || !utf8.ValidString(got[0]) {
		t.Errorf("log: %d lines, first %d bytes", len(got), len(got[0]))
	}
	for s, ok := range map[string]bool{"": true, "mr-0123": true, "mr-\x00": false, strings.Repeat("a", 300): false, "\xff": false} {
		if err := BootedRevision(s); (err == nil) != ok {
			t.Errorf("BootedRevision(%q) = %v", s, err)
		}
	}
}
