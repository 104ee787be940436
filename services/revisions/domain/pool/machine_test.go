package pool

import (
	"strings"
	"testing"
)

func TestMachineRevision(t *testing.T) {
	p, _ := created(t)
	rev := p.Revisions[0]
	base, err := NewMachineRevision("workers", rev, MachineSettings{Hostname: "node-1", Labels: map[string]string{"anvil.dev/slot": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base.ID, "mr-") || len(base.ID) != 23 || !strings.HasPrefix(base.Hash, "sha256:") || base.Verify() != nil {
		t.Fatalf("machine revision = %+v", base)
	}
	again, _ := NewMachineRevision("workers", rev, MachineSettings{Hostname: "node-1", Labels: map[string]string{"anvil.dev/slot": "3"}})
	if again.ID != base.ID || again.Hash != base.Hash {
		t.Fatal("not stable")
	}
	rev2 := rev
	rev2.Number, rev2.Hash = 2, "sha256:"+strings.Repeat("0", 64)
	for name, s := range map[string]struct {
		pool string
		rev  Revision
		ms   MachineSettings
	}{
		"pool":          {"workers-b", rev, MachineSettings{Hostname: "node-1", Labels: map[string]string{"anvil.dev/slot": "3"}}},
		"pool revision": {"workers", rev2, MachineSettings{Hostname: "node-1", Labels: map[string]string{"anvil.dev/slot": "3"}}},
		"hostname":      {"workers", rev, MachineSettings{Hostname: "node-2", Labels: map[string]string{"anvil.dev/slot": "3"}}},
		"label value":   {"workers", rev, MachineSettings{Hostname: "node-1", Labels: map[string]string{"anvil.dev/slot": "4"}}},
		"no labels":     {"workers", rev, MachineSettings{Hostname: "node-1"}},
	} {
		m, err := NewMachineRevision(s.pool, s.rev, s.ms)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID == base.ID || m.Hash == base.Hash {
			t.Errorf("changing the %s kept the machine revision", name)
		}
	}
	if _, err := NewMachineRevision("workers", Revision{}, MachineSettings{Hostname: "node-1"}); err == nil {
		t.Fatal("accepted a missing pool revision")
	}
	if _, err := NewMachineRevision("workers", rev, MachineSettings{Hostname: "Node_1"}); err == nil {
		t.Fatal("accepted a bad hostname")
	}
	tampered := base
	tampered.Hostname = "node-9"
	if tampered.Verify() == nil {
		t.Fatal("Verify missed a change")
	}
	labels := base.NodeLabels(Revision{Config: Config{NodeLabels: map[string]string{"anvil.dev/slot": "0", "anvil.dev/rack": "r1"}}})
	if labels["anvil.dev/slot"] != "3" || labels["anvil.dev/rack"] != "r1" {
		t.Fatalf("labels = %v", labels)
	}
}
