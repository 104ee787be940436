package cpio

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

type parsed struct {
	name         string
	mode, mtime  uint64
	major, minor uint64
	data         string
}

// parse reads a newc archive the way the kernel does, so the test checks
// the format (field order, padding, trailer), not the writer's own code.
func parse(t *testing.T, b []byte) []parsed {
	t.Helper()
	var out []parsed
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("field %d: %v", i, err)
			}
			return v
		}
		mode, mtime, size, major, minor, namesize := field(1), field(5), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		off = align(off + 110 + int(namesize))
		data := string(b[off : off+int(size)])
		off = align(off + int(size))
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, parsed{name: name, mode: mode, mtime: mtime, major: major, minor: minor, data: data})
	}
}

func TestWriterRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, 42)
	for _, e := range []Entry{
		Dir("dev", 0o755),
		CharDevice("/dev/console", 0o600, 5, 1),
		File("init", 0o755, []byte("hello")),
		Symlink("bin", "usr/bin"),
	} {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := parse(t, buf.Bytes())
	want := []parsed{
		{name: "dev", mode: 0o040755, mtime: 42},
		{name: "dev/console", mode: 0o020600, mtime: 42, major: 5, minor: 1},
		{name: "init", mode: 0o100755, mtime: 42, data: "hello"},
		{name: "bin", mode: 0o120777, mtime: 42, data: "usr/bin"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestAddTreeIsSortedAndReproducible(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/b"), []byte("bee"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/a"), []byte("a"), 0o644))
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Mkdir(filepath.Join(root, "tmp"), 0o777))
	must(os.Chmod(filepath.Join(root, "tmp"), 0o777|os.ModeSticky))

	archive := func() []byte {
		var buf bytes.Buffer
		w := NewWriter(&buf, 0)
		must(w.AddTree(root))
		must(w.Close())
		return buf.Bytes()
	}
	first := archive()
	if !bytes.Equal(first, archive()) {
		t.Fatal("two archives of the same tree differ")
	}
	var names []string
	modes := map[string]uint64{}
	for _, p := range parse(t, first) {
		names = append(names, p.name)
		modes[p.name] = p.mode
	}
	want := []string{"bin", "tmp", "usr", "usr/a", "usr/bin", "usr/bin/b"}
	if len(names) != len(want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("names %v, want %v", names, want)
		}
	}
	if modes["tmp"] != 0o041777 {
		t.Errorf("tmp mode %o, want sticky 041777", modes["tmp"])
	}
	if modes["usr/bin/b"] != 0o100755 {
		t.Errorf("usr/bin/b mode %o, want 100755", modes["usr/bin/b"])
	}
}
