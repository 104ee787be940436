package anvilctl_test

import (
	"strings"
	"testing"
)

// The catalog commands against the whole control plane: anyone lists the
// catalog; only the bootstrap admin adds a version; a pool that
// auto-applies platform revisions shows the setting and gets the
// platform's revision to the new patch.
func TestCLICatalog(t *testing.T) {
	s, _, viewer := startStack(t)

	out := s.must("catalog", "list", "--token", viewer)
	if !strings.Contains(out, "MINOR") || !strings.Contains(out, "1.33") || !strings.Contains(out, "1.33.5") {
		t.Fatalf("catalog list: %s", out)
	}
	s.must("apply", "-f", writeFile(t, "fleet.yaml", strings.Replace(fleet, "display_name: Workers\n",
		"display_name: Workers\nauto_apply_platform_revisions: true\n", 1)))
	if out := s.must("get", "pool", "workers", "-o", "json"); !strings.Contains(out, `"auto_apply_platform_revisions": true`) {
		t.Fatalf("the pool does not show the setting: %s", out)
	}

	if _, _, err := s.run("catalog", "add-version", "1.33.6"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("add-version with an organization's admin token: %v", err)
	}
	if _, _, err := s.run("catalog", "add-version", "1.33", "--token", adminToken); err == nil || !strings.Contains(err.Error(), "version:") {
		t.Fatalf("add-version of a minor: %v", err)
	}
	out = s.must("catalog", "add-version", "1.33.6", "--token", adminToken)
	if !strings.Contains(out, "Kubernetes 1.33.6 added to the catalog") {
		t.Fatalf("add-version: %s", out)
	}
	if _, _, err := s.run("catalog", "add-version", "1.33.6", "--token", adminToken); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("add-version twice: %v", err)
	}
	if out := s.must("catalog", "list", "-o", "json"); !strings.Contains(out, `"1.33.6"`) {
		t.Fatalf("catalog list -o json: %s", out)
	}
	// The platform's revision (pending: revision 1 was saved, not applied).
	s.eventually(func() bool {
		out, _, _ := s.run("get", "revisions", "--pool", "workers")
		return strings.Count(out, "\n") == 3 && strings.Contains(out, "Kubernetes patch release 1.33.6 (was 1.33.5)")
	})
}
