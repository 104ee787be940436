package boot

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestParseCmdline(t *testing.T) {
	got := parseCmdline(`initrd=flatcar_production_pxe_image.cpio.gz flatcar.first_boot=1 ignition.config.url=http://10.0.2.2:4567/ignition?uuid=u&token=t console=tty0 console=ttyS0,115200n8 quiet x="a b"` + "\n")
	want := map[string]string{
		"initrd":              "flatcar_production_pxe_image.cpio.gz",
		"flatcar.first_boot":  "1",
		"ignition.config.url": "http://10.0.2.2:4567/ignition?uuid=u&token=t",
		"console":             "ttyS0,115200n8",
		"quiet":               "",
		"x":                   "a b",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestParseKmsg(t *testing.T) {
	boot := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at, msg, ok := parseKmsg("6,339,5140900,-;virtio_net virtio0 eth0: renamed\n SUBSYSTEM=net\n DEVICE=n2\n", boot)
	if !ok || msg != "virtio_net virtio0 eth0: renamed" || !at.Equal(boot.Add(5140900*time.Microsecond)) {
		t.Fatalf("got %v %q %v", at, msg, ok)
	}
	if _, _, ok := parseKmsg("garbage", boot); ok {
		t.Fatal("garbage parsed")
	}
}

// resolveIn must follow symlinks as the new root sees them: Debian's
// /sbin/init is /sbin -> usr/sbin, then init -> /lib/systemd/systemd
// (absolute, so relative to the new root, not to the initramfs).
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/sbin", "usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/systemd/systemd"), []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"sbin":               "usr/sbin",
		"lib":                "usr/lib",
		"usr/sbin/init":      "/lib/systemd/systemd",
		"usr/sbin/loop":      "loop",
		"usr/sbin/dangling":  "/nowhere",
		"usr/sbin/dotdot":    "../lib/systemd/systemd",
		"usr/sbin/escaping":  "../../../../lib/systemd/systemd",
		"usr/lib/systemd/up": "..",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join(root, "usr/lib/systemd/systemd")
	for _, p := range []string{"/sbin/init", "/sbin/dotdot", "/sbin/escaping", "/lib/systemd/up/systemd/systemd"} {
		got, err := resolveIn(root, p)
		if err != nil || got != want {
			t.Errorf("resolveIn(%s): %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"/sbin/loop", "/sbin/dangling", "/sbin/missing"} {
		if got, err := resolveIn(root, p); err == nil {
			t.Errorf("resolveIn(%s) = %q, want an error", p, got)
		}
	}
}

func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "etc/systemd/system"), 0o755))
	must(os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(src, "usr/bin/x"), []byte("x"), 0o755))
	must(os.WriteFile(filepath.Join(src, "etc/shadow"), []byte("root:*:1::::::\n"), 0o640))
	must(os.Symlink("usr/bin", filepath.Join(src, "bin")))
	must(os.Symlink("/lib/systemd/system/x.service", filepath.Join(src, "etc/systemd/system/x.service")))
	must(os.Mkdir(filepath.Join(src, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(src, "tmp"), os.ModeSticky|0o777))

	n, err := copyTree(src, dst, func(name string) bool { return name == "usr" })
	must(err)
	if n != 7 { // etc, etc/shadow, etc/systemd, etc/systemd/system, the link in it, bin, tmp
		t.Errorf("copied %d entries, want 7", n)
	}
	if _, err := os.Lstat(filepath.Join(dst, "usr")); !os.IsNotExist(err) {
		t.Errorf("usr was copied (err %v), want it skipped", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "etc/shadow")); err != nil || string(b) != "root:*:1::::::\n" {
		t.Errorf("etc/shadow: %q, %v", b, err)
	}
	for path, want := range map[string]os.FileMode{"etc/shadow": 0o640, "tmp": os.ModeDir | os.ModeSticky | 0o777, "etc/systemd": os.ModeDir | 0o755} {
		if fi, err := os.Lstat(filepath.Join(dst, path)); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	for link, want := range map[string]string{"bin": "usr/bin", "etc/systemd/system/x.service": "/lib/systemd/system/x.service"} {
		if got, err := os.Readlink(filepath.Join(dst, link)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", link, got, err, want)
		}
	}
}
