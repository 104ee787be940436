package diff

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

func TestUnifiedExact(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
	b := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl\n"
	want := `--- old
+++ new
@@ -1,7 +1,7 @@
 a
 b
 c
-d
+D
 e
 f
 g
@@ -9,3 +9,4 @@
 i
 j
 k
+l
`
	if got := Unified("old", "new", a, b, 3); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if Unified("a", "b", a, a, 3) != "" {
		t.Fatal("equal texts differ")
	}
	// Changes close together share a hunk.
	got := Unified("old", "new", "1\n2\n3\n4\n5\n", "1\nX\n3\nY\n5\n", 1)
	if strings.Count(got, "@@ -") != 1 || !strings.Contains(got, "@@ -1,5 +1,5 @@") {
		t.Fatalf("got\n%s", got)
	}
	// Empty old file, missing final newline.
	got = Unified("old", "new", "", "x\ny", 3)
	if got != "--- old\n+++ new\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n" {
		t.Fatalf("got %q", got)
	}
}

// apply applies a unified diff to a text; it is the oracle for the
// property test below.
func apply(t *testing.T, old, patch string) string {
	t.Helper()
	if patch == "" {
		return old
	}
	src := strings.Split(old, "\n")
	if strings.HasSuffix(old, "\n") {
		src = src[:len(src)-1]
	}
	if old == "" {
		src = nil
	}
	var out []string
	pos := 0
	hunkRe := regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$`)
	lines := strings.Split(strings.TrimSuffix(patch, "\n"), "\n")[2:]
	noEOL := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := hunkRe.FindStringSubmatch(l); m != nil {
			start, _ := strconv.Atoi(m[1])
			n := 1
			if m[2] != "" {
				n, _ = strconv.Atoi(m[2])
			}
			if n > 0 {
				start--
			}
			out = append(out, src[pos:start]...)
			pos = start
			continue
		}
		switch {
		case l == `\ No newline at end of file`:
			if i > 0 && lines[i-1][0] != '-' {
				noEOL = true
			}
		case l[0] == ' ':
			if src[pos] != l[1:] {
				t.Fatalf("context mismatch at %d: %q vs %q", pos, src[pos], l[1:])
			}
			out = append(out, l[1:])
			pos++
		case l[0] == '-':
			if src[pos] != l[1:] {
				t.Fatalf("delete mismatch at %d: %q vs %q", pos, src[pos], l[1:])
			}
			pos++
		case l[0] == '+':
			out = append(out, l[1:])
		}
	}
	if pos < len(src) {
		// The tail is outside every hunk, so it keeps its final newline
		// (or lack of one).
		noEOL = !strings.HasSuffix(old, "\n")
	}
	out = append(out, src[pos:]...)
	if len(out) == 0 {
		return ""
	}
	res := strings.Join(out, "\n")
	if !noEOL {
		res += "\n"
	}
	return res
}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(30) {
		b.WriteString(string(rune('a' + r.IntN(4))))
		b.WriteString("\n")
	}
	return b.String()
}

func TestUnifiedApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(eventstest.Seed(t, 1), 2))
	for i := range 2000 {
		a, b := randomText(r), randomText(r)
		for _, ctx := range []int{0, 1, 3} {
			patch := Unified("a", "b", a, b, ctx)
			if got := apply(t, a, patch); got != b {
				t.Fatalf("case %d ctx %d: patch does not turn a into b\na=%q\nb=%q\npatch:\n%s", i, ctx, a, b, patch)
			}
		}
	}
}

func FuzzUnified(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Add("x\n", "x")
	f.Add("same\n", "same\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 4096 || len(b) > 4096 {
			return
		}
		patch := Unified("a", "b", a, b, 3)
		if (patch == "") != (a == b) {
			t.Fatalf("empty patch iff equal texts")
		}
		// The oracle needs lines that start cleanly; it handles any text
		// that has no "\r" or lone "\\" lines.
		if got := apply(t, a, patch); got != b {
			t.Fatalf("patch does not apply\na=%q\nb=%q\npatch:\n%s", a, b, patch)
		}
	})
}

func TestFields(t *testing.T) {
	type item struct {
		Name string `json:"name"`
		Mode string `json:"mode,omitempty"`
	}
	type doc struct {
		Version string            `json:"version"`
		Labels  map[string]string `json:"labels,omitempty"`
		Items   []item            `json:"items,omitempty"`
		Keys    []string          `json:"keys,omitempty"`
		Disk    *item             `json:"disk,omitempty"`
	}
	a := doc{Version: "1.33.4", Labels: map[string]string{"anvil.dev/rack": "r1", "x": "1"}, Items: []item{{"a", "m"}, {"c", "m"}}, Keys: []string{"k1", "k2"}}
	b := doc{Version: "1.33.5", Labels: map[string]string{"anvil.dev/rack": "r2", "y": "1"}, Items: []item{{"a", "m"}, {"b", "m"}, {"c", "n"}}, Keys: []string{"k2"}, Disk: &item{Name: "/dev/sdb"}}
	changes, err := Fields(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s: %s -> %s", c.Path, orNone(c.Old), orNone(c.New)))
	}
	want := []string{
		`disk: - -> {"name":"/dev/sdb"}`,
		`items[1]: - -> {"mode":"m","name":"b"}`,
		`items[2].mode: "m" -> "n"`,
		`keys[0]: "k1" -> -`,
		`labels["anvil.dev/rack"]: "r1" -> "r2"`,
		`labels.x: "1" -> -`,
		`labels.y: - -> "1"`,
		`version: "1.33.4" -> "1.33.5"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c, _ := Fields(a, a); len(c) != 0 {
		t.Fatalf("equal values differ: %v", c)
	}
	out, _ := json.Marshal(changes[0])
	if string(out) != `{"path":"disk","new":{"name":"/dev/sdb"}}` {
		t.Fatalf("json = %s", out)
	}
}

func orNone(b json.RawMessage) string {
	if b == nil {
		return "-"
	}
	return string(b)
}
