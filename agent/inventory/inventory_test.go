package inventory

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/agent/api"
)

// testdata/host is a trimmed copy of a 16-core server's /proc and /sys: two
// NVMe disks (plus a partition, a loop device and a device-mapper target that
// must be skipped) and two physical NICs (one link-down) next to lo and a bridge.
const host = "testdata/host"

func TestReadFakeHost(t *testing.T) {
	hw, err := Read(host)
	if err != nil {
		t.Fatal(err)
	}
	want := api.Hardware{
		CPUs:        16,
		MemoryBytes: 65860512 * 1024,
		Disks: []api.Disk{
			{Name: "nvme0n1", SizeBytes: 3750748848 * 512, Model: "SAMSUNG MZQL21T9HCJR-00A07"},
			{Name: "nvme1n1", SizeBytes: 7501476528 * 512, Model: "SAMSUNG MZQL23T8HCLS-00A07"},
		},
		NICs: []api.NIC{
			{Name: "eno1", MAC: "aa:bb:cc:dd:ee:01", SpeedMbps: 25000},
			{Name: "eno2", MAC: "aa:bb:cc:dd:ee:02"},
		},
	}
	if !reflect.DeepEqual(hw, want) {
		t.Errorf("Read:\n got %+v\nwant %+v", hw, want)
	}
}

func TestCPUsFallsBackToOnlineList(t *testing.T) {
	root := t.TempDir()
	write(t, root, "proc/cpuinfo", "Processor\t: ARMv7\nfeatures\t: neon\n")
	write(t, root, "sys/devices/system/cpu/online", "0-3,8-11,16\n")
	if n, err := CPUs(root); err != nil || n != 9 {
		t.Errorf("CPUs = %d, %v; want 9", n, err)
	}
	write(t, root, "sys/devices/system/cpu/online", "3-1\n")
	if _, err := CPUs(root); err == nil {
		t.Error("a reversed range was accepted")
	}
}

func TestReadIsBestEffort(t *testing.T) {
	root := t.TempDir()
	write(t, root, "proc/meminfo", "MemTotal:     1024 kB\n")
	write(t, root, "sys/block/sda/size", "not a number\n")
	write(t, root, "sys/block/sdb/size", "100\n")
	write(t, root, "sys/block/sdb/queue/rotational", "1\n")
	write(t, root, "sys/class/net/enp1s0/address", "52:54:00:12:34:56\n")
	write(t, root, "sys/class/net/enp1s0/speed", "4294967295\n")
	write(t, root, "sys/class/net/enp1s0/device/vendor", "0x1af4\n")
	hw, err := Read(root)
	if err == nil {
		t.Fatal("missing cpuinfo and a bad disk size were not reported")
	}
	for _, part := range []string{"cpu count", "disk sda"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
	if hw.MemoryBytes != 1024*1024 || len(hw.Disks) != 1 || !hw.Disks[0].Rotational || hw.Disks[0].SizeBytes != 51200 {
		t.Errorf("partial inventory lost: %+v", hw)
	}
	if len(hw.NICs) != 1 || hw.NICs[0].SpeedMbps != 0 {
		t.Errorf("an unsigned SPEED_UNKNOWN must read as 0: %+v", hw.NICs)
	}
	if empty, _ := Read(t.TempDir()); empty.NICs == nil || empty.Disks == nil {
		t.Error("lists must encode as [], not null")
	}
}

func TestRebootRequired(t *testing.T) {
	root := t.TempDir()
	if req, _, err := RebootRequired(root); req || err != nil {
		t.Fatalf("no flag: %v %v", req, err)
	}
	write(t, root, "run/reboot-required", "")
	if req, reason, err := RebootRequired(root); !req || err != nil || reason != "/run/reboot-required exists" {
		t.Fatalf("flag: %v %q %v", req, reason, err)
	}
	write(t, root, "run/reboot-required.pkgs", "linux-image\nsystemd\n")
	if _, reason, _ := RebootRequired(root); !strings.Contains(reason, "linux-image, systemd") {
		t.Fatalf("reason %q does not list the packages", reason)
	}
}

func TestBootID(t *testing.T) {
	if id, err := BootID(host); err != nil || id != "5d1a3c0e-8f5b-4e5e-9a77-1f0c2b9d7a61" {
		t.Errorf("BootID = %q, %v", id, err)
	}
}

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMachineUUID(t *testing.T) {
	for _, tc := range []struct {
		content, want string
		ok            bool
	}{
		{"4c4c4544-0035-4b10-8056-b7c04f4e3532\n", "4c4c4544-0035-4b10-8056-b7c04f4e3532", true},
		{"  4C4C4544-0035-4B10-8056-B7C04F4E3532  \n", "4c4c4544-0035-4b10-8056-b7c04f4e3532", true},
		{"00000000-0000-0000-0000-000000000000\n", "", false},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff\n", "", false},
		{"4c4c4544003542108056b7c04f4e3532\n", "", false},
		{"{4c4c4544-0035-4b10-8056-b7c04f4e3532}\n", "", false},
		{"", "", false},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "sys/class/dmi/id")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "product_uuid"), []byte(tc.content), 0o400); err != nil {
			t.Fatal(err)
		}
		got, err := MachineUUID(root)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: got %q, %v", tc.content, got, err)
		}
	}
	if _, err := MachineUUID(t.TempDir()); err == nil {
		t.Error("missing file accepted")
	}
}
