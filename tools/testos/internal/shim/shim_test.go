package shim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The exact command lines anvil-agent runs (agent/journal.go, agent/reboot.go).
func TestParsesTheAgentsCommands(t *testing.T) {
	j, err := ParseJournalctl([]string{"-b", "--no-pager", "-o", "short-iso", "-n", "200"})
	if err != nil || j != (JournalctlArgs{Lines: 200, Output: "short-iso"}) {
		t.Fatalf("journalctl: %+v, %v", j, err)
	}
	s, err := ParseSystemctl([]string{"reboot", "--message=anvil-agent: instruction i-1: reboot into revision mr-2"})
	if err != nil || s.Verb != "reboot" || s.Message != "anvil-agent: instruction i-1: reboot into revision mr-2" {
		t.Fatalf("systemctl: %+v, %v", s, err)
	}
}

func TestParseJournalctlForms(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want JournalctlArgs
	}{
		{nil, JournalctlArgs{Lines: -1, Output: "short"}},
		{[]string{"-n"}, JournalctlArgs{Lines: 10, Output: "short"}},
		{[]string{"-n5", "-oshort-iso"}, JournalctlArgs{Lines: 5, Output: "short-iso"}},
		{[]string{"--lines=7", "--output=short"}, JournalctlArgs{Lines: 7, Output: "short"}},
		{[]string{"-n", "--no-pager"}, JournalctlArgs{Lines: 10, Output: "short"}},
	} {
		got, err := ParseJournalctl(tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"-u", "x"}, {"-o", "json"}, {"-n", "x"}} {
		if _, err := ParseJournalctl(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestJournalctlPrintsTheTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "journal")
	var b strings.Builder
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, "2026-03-01T10:00:0%d+0000 h anvil-agent[9]: line %d\n", i, i)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := Journalctl([]string{"-b", "--no-pager", "-o", "short-iso", "-n", "2"}, p, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := "2026-03-01T10:00:04+0000 h anvil-agent[9]: line 4\n2026-03-01T10:00:05+0000 h anvil-agent[9]: line 5\n"; out.String() != want {
		t.Fatalf("got:\n%s", out.String())
	}
	out.Reset()
	if code := Journalctl([]string{"-n", "1"}, filepath.Join(t.TempDir(), "none"), &out, &errOut); code != 1 {
		t.Fatalf("a missing journal exits %d", code)
	}
}

func TestSystemctlIsEnabledAndDisable(t *testing.T) {
	root := t.TempDir()
	mk := func(p, c string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("/etc/systemd/system/a.service", "[Service]\nExecStart=/bin/true\n")
	mk("/etc/systemd/system/b.service", "[Service]\nExecStart=/bin/true\n")
	mk("/etc/systemd/system-preset/20-ignition.preset", "enable a.service\n")
	if err := os.MkdirAll(filepath.Join(root, "/etc/systemd/system/multi-user.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../b.service", filepath.Join(root, "/etc/systemd/system/multi-user.target.wants/b.service")); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Systemctl([]string{"--root", root, "is-enabled", "a.service", "b.service", "c.service"}, &out, &errOut)
	if code != 1 || out.String() != "enabled\nenabled\nnot-found\n" {
		t.Fatalf("is-enabled: exit %d, %q %q", code, out.String(), errOut.String())
	}
	if code := Systemctl([]string{"--root=" + root, "disable", "b.service"}, &out, &errOut); code != 0 {
		t.Fatalf("disable: exit %d: %s", code, errOut.String())
	}
	out.Reset()
	Systemctl([]string{"--root", root, "is-enabled", "b.service"}, &out, &errOut)
	if out.String() != "disabled\n" {
		t.Fatalf("after disable: %q", out.String())
	}
}

func TestSystemctlRefusesWhatItCannotDo(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Systemctl([]string{"start", "kubelet.service"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "not supported") {
		t.Fatalf("start: exit %d, %q", code, errOut.String())
	}
	if _, err := ParseSystemctl([]string{"--user", "reboot"}); err == nil {
		t.Fatal("--user accepted")
	}
	if got, _ := ParseSystemctl([]string{"-ff", "reboot"}); !reflect.DeepEqual(got, SystemctlArgs{Verb: "reboot", Force: 2}) {
		t.Fatalf("-ff: %+v", got)
	}
}
