package anvilctl

import (
	"bytes"
	"strings"
	"testing"
)

// TestMachinesRebootColumn: get machines shows the agent's reboot-required
// indicator: yes, no once the agent has reported, and nothing before.
func TestMachinesRebootColumn(t *testing.T) {
	r, err := lookupResource("machines")
	if err != nil {
		t.Fatal(err)
	}
	objs := []map[string]any{
		obj(`{"uuid":"u1","hostname":"w1","current_revision_at":"2026-11-02T09:00:00Z","reboot":{"required":true,"reason":"/run/reboot-required exists"}}`),
		obj(`{"uuid":"u2","hostname":"w2","current_revision_at":"2026-11-02T09:00:00Z"}`),
		obj(`{"uuid":"u3","hostname":"w3","hardware_reported_at":"2026-11-02T09:00:00Z"}`),
		obj(`{"uuid":"u4","hostname":"w4"}`),
	}
	var b bytes.Buffer
	if err := printTable(&b, r.cols, objs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	header := strings.Fields(lines[0])
	col := -1
	for i, h := range header {
		if h == "REBOOT" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("no REBOOT column:\n%s", b.String())
	}
	// Every column before REBOOT is one word (LAST SEEN comes after it).
	for i, want := range []string{"yes", "no", "no", "-"} {
		if got := strings.Fields(lines[i+1]); len(got) <= col || got[col] != want {
			t.Errorf("machine u%d: REBOOT %v, want %s:\n%s", i+1, got, want, b.String())
		}
	}
}
