package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlainOutputWithoutTerminal: piped or redirected (a buffer, a file),
// the demo prints plain lines: no escape code, no carriage return, every
// progress line once on its own line.
func TestPlainOutputWithoutTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name string
		w    io.Writer
		read func() string
	}{
		{"buffer", &bytes.Buffer{}, nil},
		{"file", f, func() string { b, _ := os.ReadFile(f.Name()); return string(b) }},
	} {
		u := newUI(c.w, 2)
		if u.tty {
			t.Fatalf("%s: taken for a terminal", c.name)
		}
		u.header("Start")
		u.progress("%d of %d machines", 1, 3)
		u.progress("%d of %d machines", 1, 3)
		u.printf("machine %s registered", "w1")
		u.progressKey("phase 2", "%d of %d machines", 2, 3)
		u.done()
		u.header("Summary of " + u.bold("the story"))
		got := ""
		if c.read != nil {
			got = c.read()
		} else {
			got = c.w.(*bytes.Buffer).String()
		}
		want := "\n[1/2] Start\n  1 of 3 machines\n  machine w1 registered\n  2 of 3 machines\n\n[2/2] Summary of the story\n"
		if got != want {
			t.Errorf("%s: %q, want %q", c.name, got, want)
		}
		if strings.ContainsAny(got, "\x1b\r") {
			t.Errorf("%s: escape codes or carriage returns in %q", c.name, got)
		}
	}
}

// TestTerminalOutputIsBold: on a terminal the titles are bold and the
// progress line is redrawn in place (what the plain output leaves out).
func TestTerminalOutputIsBold(t *testing.T) {
	var b bytes.Buffer
	u := &ui{out: &b, tty: true, steps: 1}
	u.header("Start")
	u.progress("1 of 3")
	u.progress("2 of 3")
	u.done()
	if want := "\n\x1b[1m[1/1] Start\x1b[0m\n  1 of 3\r\x1b[K  2 of 3\n"; b.String() != want {
		t.Errorf("%q, want %q", b.String(), want)
	}
}
