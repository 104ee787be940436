package passwd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func seed(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"/etc/passwd":  "root:x:0:0:root:/root:/bin/sh\ncore:x:500:500:Flatcar Admin:/home/core:/bin/sh\n",
		"/etc/shadow":  "root:*:1::::::\ncore:*:1::::::\n",
		"/etc/group":   "root:x:0:\nwheel:x:10:root\ndocker:x:233:\ncore:x:500:\n",
		"/etc/gshadow": "root:::\nwheel:::root\ndocker:::\ncore:::\n",
	}
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func run(t *testing.T, tool string, args ...string) error {
	t.Helper()
	o, err := ParseArgs(tool, args)
	if err != nil {
		return err
	}
	return Run(tool, o)
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The calls below are the ones Ignition v2.27's EnsureUser/EnsureGroup
// make (internal/exec/util/passwd.go).
func TestIgnitionModifiesAnExistingUser(t *testing.T) {
	root := seed(t)
	if err := run(t, "usermod", "--root", root, "--password", "$6$hash", "--groups", "wheel,docker", "--shell", "/bin/bash", "core"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/passwd"); !strings.Contains(got, "core:x:500:500:Flatcar Admin:/home/core:/bin/bash\n") {
		t.Errorf("passwd:\n%s", got)
	}
	if got := read(t, root, "/etc/shadow"); !strings.Contains(got, "\ncore:$6$hash:") {
		t.Errorf("shadow:\n%s", got)
	}
	if got := read(t, root, "/etc/group"); !strings.Contains(got, "wheel:x:10:root,core\n") || !strings.Contains(got, "docker:x:233:core\n") {
		t.Errorf("group:\n%s", got)
	}
	if got := read(t, root, "/etc/gshadow"); !strings.Contains(got, "docker:::core\n") {
		t.Errorf("gshadow:\n%s", got)
	}
	// --groups replaces the secondary groups.
	if err := run(t, "usermod", "--root", root, "--groups", "docker", "core"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/group"); !strings.Contains(got, "wheel:x:10:root\n") {
		t.Errorf("core still in wheel:\n%s", got)
	}
}

func TestIgnitionAddsAUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("useradd --create-home chowns the home directory, which needs root")
	}
	root := seed(t)
	if err := run(t, "useradd", "--root", root, "--create-home", "--password", "*", "--uid", "1001", "--comment", "Ops", "--groups", "wheel", "ops"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/passwd"); !strings.Contains(got, "ops:x:1001:1001:Ops:/home/ops:/bin/sh\n") {
		t.Errorf("passwd:\n%s", got)
	}
	if got := read(t, root, "/etc/group"); !strings.Contains(got, "ops:x:1001:\n") || !strings.Contains(got, "wheel:x:10:root,ops\n") {
		t.Errorf("group:\n%s", got)
	}
	fi, err := os.Stat(filepath.Join(root, "/home/ops"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home: %v %v", fi, err)
	}
	if err := run(t, "useradd", "--root", root, "ops"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second useradd: %v", err)
	}
	if err := run(t, "userdel", "--remove", "--root", root, "ops"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/passwd"); strings.Contains(got, "ops:") {
		t.Errorf("ops still in passwd:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "/home/ops")); !os.IsNotExist(err) {
		t.Errorf("home still there: %v", err)
	}
}

func TestGroups(t *testing.T) {
	root := seed(t)
	if err := run(t, "groupadd", "--root", root, "--gid", "2000", "ops"); err != nil {
		t.Fatal(err)
	}
	if err := run(t, "groupadd", "--root", root, "--system", "svc"); err != nil {
		t.Fatal(err)
	}
	if err := run(t, "groupmod", "--root", root, "--gid", "2001", "ops"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/group"); !strings.Contains(got, "ops:x:2001:\n") || !strings.Contains(got, "svc:x:100:\n") {
		t.Errorf("group:\n%s", got)
	}
	if err := run(t, "groupdel", "--root", root, "ops"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, root, "/etc/group"); strings.Contains(got, "ops:") {
		t.Errorf("ops still there:\n%s", got)
	}
	if err := run(t, "groupadd", "--root", root, "--gid", "10", "dup"); err == nil {
		t.Error("a taken gid was accepted")
	}
}

func TestUnknownFlagsAreNamed(t *testing.T) {
	_, err := ParseArgs("useradd", []string{"--root", "/x", "--selinux-user", "u", "core"})
	if err == nil || !strings.Contains(err.Error(), "--selinux-user") {
		t.Fatalf("err = %v", err)
	}
	if _, err := ParseArgs("usermod", []string{"--root", "/x"}); err == nil {
		t.Fatal("no name accepted")
	}
}
