// Package journal is the test OS's stand-in for systemd-journald: one
// append-only text file in /run holding this boot's log, already in the
// format `journalctl -o short-iso` prints, so the journalctl shim only has
// to print its tail. Every line is redacted before it is written.
package journal

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Path is the journal of this boot. /run is a tmpfs, so like a volatile
// journald it starts empty on every boot.
const Path = "/run/anvil-testos/journal"

// isoLayout is systemd's short-iso timestamp (e.g. 2026-03-01T10:00:00+0000).
const isoLayout = "2006-01-02T15:04:05-0700"

// Line formats one entry as `journalctl -o short-iso` prints it:
// "<time> <host> <ident>[<pid>]: <message>" (no "[pid]" when pid <= 0).
func Line(t time.Time, host, ident string, pid int, msg string) string {
	if host == "" {
		host = "localhost"
	}
	tag := ident
	if pid > 0 {
		tag = fmt.Sprintf("%s[%d]", ident, pid)
	}
	return t.Format(isoLayout) + " " + host + " " + tag + ": " + msg
}

// Short turns a short-iso line into journalctl's default "short" format
// ("Mar 01 10:00:00 host ident[pid]: message"); a line that does not parse
// is returned as it is.
func Short(line string) string {
	ts, rest, ok := strings.Cut(line, " ")
	if !ok {
		return line
	}
	t, err := time.Parse(isoLayout, ts)
	if err != nil {
		return line
	}
	return t.Format(time.Stamp) + " " + rest
}

var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	// Per-boot tokens travel in Ignition's config URL.
	{regexp.MustCompile(`([?&]token=)[A-Za-z0-9._~%+/=-]+`), "${1}REDACTED"},
	// The agent credential, plain or percent-escaped in a data URL.
	{regexp.MustCompile(`(ANVIL_AGENT_CREDENTIAL(=|%3[dD]))[^\s"'&%]+`), "${1}REDACTED"},
	{regexp.MustCompile(`(?i)(authorization:\s*bearer\s+)\S+`), "${1}REDACTED"},
}

// Redact removes secrets a boot may print: per-boot tokens in URLs and the
// agent credential. The journal is sent to the boot service in the agent's
// report and the console often ends up in CI logs.
func Redact(s string) string {
	for _, r := range redactions {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// Tail returns the last n lines of r (all of them when n < 0).
func Tail(r io.Reader, n int) ([]string, error) {
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if n >= 0 && len(lines) > 2*n+64 {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if n >= 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, sc.Err()
}

// Writer appends entries to the journal file and, for those that ask for
// it, to the console. It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	file    io.Writer
	console io.Writer
	host    func() string
	now     func() time.Time
}

// Open appends to the journal at path (creating /run/anvil-testos) and
// writes console lines to console.
func Open(path string, console io.Writer, host func() string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	return New(f, console, host), nil
}

// New writes journal lines to file and console lines to console.
func New(file, console io.Writer, host func() string) *Writer {
	if host == nil {
		host = func() string { h, _ := os.Hostname(); return h }
	}
	return &Writer{file: file, console: console, host: host, now: time.Now}
}

// LogAt records msg from ident[pid] at time at, in the journal only (the
// kernel's lines, which the console already showed).
func (w *Writer) LogAt(at time.Time, ident string, pid int, msg string) {
	msg = Redact(strings.TrimRight(msg, "\r\n"))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		_, _ = io.WriteString(w.file, Line(at, w.host(), ident, pid, msg)+"\n")
	}
}

// Log records msg from ident[pid]. With toConsole it is also printed on
// the console as "<ident>[<pid>]: <msg>", or as "<ident>: <msg>" for the
// init itself (pid <= 0), which is how the test OS's own lines read.
func (w *Writer) Log(ident string, pid int, msg string, toConsole bool) {
	msg = Redact(strings.TrimRight(msg, "\r\n"))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		_, _ = io.WriteString(w.file, Line(w.now(), w.host(), ident, pid, msg)+"\n")
	}
	if toConsole && w.console != nil {
		tag := ident
		if pid > 0 {
			tag = fmt.Sprintf("%s[%d]", ident, pid)
		}
		_, _ = io.WriteString(w.console, tag+": "+msg+"\n")
	}
}
