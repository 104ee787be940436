package fields

import (
	"strings"
	"testing"
)

func TestRules(t *testing.T) {
	ok := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := func(name string, err error, reason string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: want a refusal with %q, got %v", name, reason, err)
		}
	}
	ok("hostname", Hostname("node-1.rack-7"))
	ok("hostname of 63", Hostname(strings.Repeat("a", 63)))
	bad("hostname of 64: what the registry once took and the renderer refused", Hostname(strings.Repeat("a", 64)), "at most 63")
	bad("uppercase hostname", Hostname("Node-1"), "lowercase")
	bad("empty label", Hostname("a..b"), "label 2 is empty")
	ok("label key", LabelKey("anvil.dev/tier"))
	bad("label key", LabelKey("-x"), "name part")
	ok("label value", LabelValue(""))
	bad("label value", LabelValue("a b"), "letters, digits")
	ok("dns label", DNSLabel("workers"))
	bad("dns label", DNSLabel("Workers"), "lowercase")

	if u, err := UUID("4C4C4544-0035-4B10-8056-B7C04F4E3532"); err != nil || u != "4c4c4544-0035-4b10-8056-b7c04f4e3532" {
		t.Errorf("UUID canonical form: %q %v", u, err)
	}
	_, err := UUID("00000000-0000-0000-0000-000000000000")
	bad("nil uuid", err, "nil")
	_, err = UUID("4c4c4544_0035-4b10-8056-b7c04f4e3532")
	bad("uuid with underscore", err, "hyphens")
	for s, want := range map[string]bool{
		"4c4c4544-0035-4b10-8056-b7c04f4e3532": true,
		"4C4C4544-0035-4B10-8056-B7C04F4E3532": false, // a UUID, not in canonical form
		"00000000-0000-0000-0000-000000000000": false,
		"4c4c4544-0035-4b10-8056-b7c04f4e353":  false,
	} {
		if got := CanonicalUUID(s); got != want {
			t.Errorf("CanonicalUUID(%q) = %v, want %v", s, got, want)
		}
	}

	ok("display name", DisplayName("Acme GmbH — Zürich"))
	bad("bidi override in a name", DisplayName("admin\u202Etxt.exe"), "direction-changing")
	bad("zero-width in a name", DisplayName("ac\u200Bme"), "invisible")
	bad("control in a name", DisplayName("a\x01b"), "control")
	bad("blank name", DisplayName("  "), "empty")

	ok("reason", Text("drain blocked by pdb/web", 100, false))
	bad("escape sequence in a reason", Text("\x1b[31mred", 100, false), "one line")
	bad("newline in a one-line reason", Text("a\nb", 100, false), "one line")
	ok("multiline message", Text("line 1\nline 2\twith tab", 100, true))
	bad("carriage return in a message", Text("a\rb", 100, true), "control")
	bad("too long", Text(strings.Repeat("x", 101), 100, false), "at most 100")
	bad("invalid utf-8", Text("\xff", 100, false), "UTF-8")

	ok("token name", Token("ci-runner", 64))
	bad("token name with space", Token("ci runner", 64), "spaces")
}

func FuzzRules(f *testing.F) {
	for _, s := range []string{"a", "node-1", "4c4c4544-0035-4b10-8056-b7c04f4e3532", "\u202E", "a.b.c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// Every rule answers without panicking; what a rule accepts meets
		// the rules built on it.
		if Hostname(s) == nil && (DNSSubdomain(s) != nil || len(s) > MaxHostname) {
			t.Fatalf("hostname %q accepted but breaks its parts", s)
		}
		if u, err := UUID(s); err == nil {
			if u2, err := UUID(u); err != nil || u2 != u {
				t.Fatalf("canonical UUID %q does not round-trip", u)
			}
		}
		if DisplayName(s) == nil && Text(s, 4*MaxDisplayName, false) != nil && !strings.ContainsAny(s, "\n\t") {
			t.Fatalf("display name %q accepted but not as one-line text", s)
		}
		_ = LabelKey(s)
		_ = LabelValue(s)
		_ = Token(s, 64)
	})
}

// A pool's name is a DNS label, and a node is named after the machine's
// hostname, or its UUID when it has none.
func TestPoolAndNodeNames(t *testing.T) {
	for _, p := range []string{"workers", "gpu-a100", strings.Repeat("a", 63)} {
		if err := PoolName(p); err != nil {
			t.Errorf("PoolName(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "Workers", "-a", "a_b", "a.b", strings.Repeat("a", 64)} {
		if PoolName(p) == nil {
			t.Errorf("PoolName(%q) accepted", p)
		}
	}
	const uuid = "4c4c4544-0000-0000-0000-000000000001"
	if got := NodeName("w1", uuid); got != "w1" {
		t.Errorf("NodeName with a hostname = %q", got)
	}
	if got := NodeName("", uuid); got != uuid {
		t.Errorf("NodeName without a hostname = %q", got)
	}
}

// TestOrgID pins the organization ids every service accepts: the set the
// registry has always created (an RFC 1123 label), refused with one reason.
func TestOrgID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"0", true},
		{"acme", true},
		{"a-1", true},
		{"a--b", true},
		{"123", true},
		{strings.Repeat("x", 63), true},
		{"", false},
		{"-", false},
		{"-a", false},
		{"a-", false},
		{"A", false},
		{"Acme", false},
		{"a.b", false},
		{"a_b", false},
		{"_platform", false},
		{"a b", false},
		{"ä", false},
		{"a*", false},
		{"a>", false},
		{strings.Repeat("x", 64), false},
	} {
		err := OrgID(tc.id)
		switch {
		case tc.want && err != nil:
			t.Errorf("OrgID(%q) = %v, want it accepted", tc.id, err)
		case !tc.want && err == nil:
			t.Errorf("OrgID(%q) accepted, want it refused", tc.id)
		case !tc.want && err.Error() != errOrgID.Error():
			t.Errorf("OrgID(%q) = %q, want the one reason %q", tc.id, err, errOrgID)
		}
		if (err == nil) != (DNSLabel(tc.id) == nil) {
			t.Errorf("OrgID(%q) and DNSLabel disagree: the registry has always created DNS labels", tc.id)
		}
	}
}
