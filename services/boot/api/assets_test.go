package api

import "testing"

// TestAssetNames: what the naming functions spell, ParseAsset takes apart
// again, and they refuse what they cannot name.
func TestAssetNames(t *testing.T) {
	for _, goarch := range AgentArches {
		n, err := AgentAsset(goarch)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseAsset(n)
		if err != nil || r.Kind != KindAgent || r.GoArch != goarch {
			t.Errorf("%s: %+v %v", n, r, err)
		}
		arch, _ := SysextArch(goarch)
		s, err := SysextAsset("1.33.4", arch)
		if err != nil {
			t.Fatal(err)
		}
		r, err = ParseAsset(s)
		if err != nil || r.Kind != KindSysext || r.Version != "1.33.4" || r.Arch != arch || r.GoArch != goarch {
			t.Errorf("%s: %+v %v", s, r, err)
		}
	}
	if n, _ := AgentAsset("amd64"); n != "assets/anvil-agent-linux-amd64" {
		t.Errorf("agent: %s", n)
	}
	if n, _ := SysextAsset("1.37.1", "x86-64"); n != "sysext/kubernetes-v1.37.1-x86-64.raw" {
		t.Errorf("sysext: %s", n)
	}
	if n, _ := FlatcarAsset("stable", "4230.2.3", "flatcar_production_pxe.vmlinuz"); n != "flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz" {
		t.Errorf("flatcar: %s", n)
	}
	for _, bad := range [][2]string{{"1.33", "x86-64"}, {"v1.33.4", "x86-64"}, {"1.33.4", "amd64"}, {"1.33.4", ""}, {"1.33.4-rc.1", "arm64"}} {
		if n, err := SysextAsset(bad[0], bad[1]); err == nil {
			t.Errorf("SysextAsset(%q, %q) = %s", bad[0], bad[1], n)
		}
	}
	for _, bad := range []string{"x86-64", "riscv64", "", "386"} {
		if n, err := AgentAsset(bad); err == nil {
			t.Errorf("AgentAsset(%q) = %s", bad, n)
		}
	}
	if _, err := FlatcarAsset("..", "1", "f"); err == nil {
		t.Error("FlatcarAsset accepted ..")
	}
}
