package journal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLineIsShortISO(t *testing.T) {
	ts := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	got := Line(ts, "node-1", "anvil-agent", 42, "hello")
	want := "2026-03-01T10:00:00+0000 node-1 anvil-agent[42]: hello"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := Line(ts, "", "anvil-testos", 0, "x"); got != "2026-03-01T10:00:00+0000 localhost anvil-testos: x" {
		t.Fatalf("without host and pid: %q", got)
	}
	if got := Short(want); got != "Mar  1 10:00:00 node-1 anvil-agent[42]: hello" {
		t.Fatalf("short: %q", got)
	}
	if got := Short("not a journal line"); got != "not a journal line" {
		t.Fatalf("short of garbage: %q", got)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET http://10.0.2.2:1234/ignition?uuid=u&token=s3cr3t: attempt #1",
			"GET http://10.0.2.2:1234/ignition?uuid=u&token=REDACTED: attempt #1"},
		{"http://x/ignition?token=abc&uuid=u", "http://x/ignition?token=REDACTED&uuid=u"},
		{"ANVIL_AGENT_CREDENTIAL=abcdefghijklmnopqrstuv", "ANVIL_AGENT_CREDENTIAL=REDACTED"},
		{`"source": "data:,ANVIL_AGENT_CREDENTIAL%3Dabcdefghijklmnopqrstuv%0A"`,
			`"source": "data:,ANVIL_AGENT_CREDENTIAL%3DREDACTED%0A"`},
		{"Authorization: Bearer abc.def", "Authorization: Bearer REDACTED"},
		{"nothing secret here", "nothing secret here"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTail(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	got, err := Tail(strings.NewReader(b.String()), 3)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "line 498,line 499,line 500" {
		t.Fatalf("tail 3: %v", got)
	}
	all, _ := Tail(strings.NewReader(b.String()), -1)
	if len(all) != 500 {
		t.Fatalf("tail -1: %d lines", len(all))
	}
	none, _ := Tail(strings.NewReader(b.String()), 0)
	if len(none) != 0 {
		t.Fatalf("tail 0: %v", none)
	}
}

func TestWriterRedactsBothSinks(t *testing.T) {
	var file, console bytes.Buffer
	w := New(&file, &console, func() string { return "h" })
	w.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	w.Log("ignition", 7, "GET http://a/ignition?token=secret", true)
	w.Log("anvil-testos", 0, "quiet", false)
	if got := file.String(); got != "2026-01-02T03:04:05+0000 h ignition[7]: GET http://a/ignition?token=REDACTED\n"+
		"2026-01-02T03:04:05+0000 h anvil-testos: quiet\n" {
		t.Fatalf("journal file:\n%s", got)
	}
	if got := console.String(); got != "ignition[7]: GET http://a/ignition?token=REDACTED\n" {
		t.Fatalf("console:\n%s", got)
	}
}
