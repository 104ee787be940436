package faults_test

import (
	"strings"
	"testing"
)

// viewsDiff names the paths where two documents differ, with both values.
func TestViewsDiff(t *testing.T) {
	a := []byte(`{"Machines":[{"uuid":"m1","status":"ready","last_ipxe_boot_at":"10:00"},{"uuid":"m2"}],"Rollouts":[]}`)
	b := []byte(`{"Machines":[{"uuid":"m1","status":"ready","last_ipxe_boot_at":"09:59"},{"uuid":"m2","extra":1}],"Rollouts":[]}`)
	got := viewsDiff(a, b, 10)
	for _, want := range []string{`.Machines[0].last_ipxe_boot_at: "10:00", then "09:59"`, `.Machines[1].extra: null, then 1`} {
		if !strings.Contains(got, want) {
			t.Errorf("viewsDiff lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "status") || strings.Contains(got, "uuid") {
		t.Errorf("viewsDiff names what is equal:\n%s", got)
	}
	if got := viewsDiff(a, a, 10); got != "no difference" {
		t.Errorf("the same document: %q", got)
	}
	if got := viewsDiff(a, b, 1); strings.Count(got, "\n") != 0 {
		t.Errorf("limit 1 gave more than one line:\n%s", got)
	}
}
