package signing

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	uuid  = "4c4c4544-0035-4b10-8056-b7c04f4e3532"
	other = "4c4c4544-0035-4b10-8056-b7c04f4e3533"
	mrid  = "mr-0123456789abcdef0123"
)

var now = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func keys(t testing.TB, b ...byte) Keys {
	t.Helper()
	var raw [][]byte
	for _, c := range b {
		raw = append(raw, bytes.Repeat([]byte{c}, 32))
	}
	k, err := NewKeys(raw...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestBootToken(t *testing.T) {
	k := keys(t, 1)
	claims := BootClaims{Org: "acme", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour)}
	tok := k.SignBoot(claims)
	if !regexp.MustCompile(`^pb1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`).MatchString(tok) {
		t.Fatalf("token %q is not URL-safe", tok)
	}
	got, err := k.VerifyBoot(tok, uuid, now)
	if err != nil || got != claims {
		t.Fatalf("verify: %+v %v", got, err)
	}
	// Rotation: a token signed with the old key verifies while it is listed.
	rotated := keys(t, 2, 1)
	if _, err := rotated.VerifyBoot(tok, uuid, now); err != nil {
		t.Errorf("old key no longer verifies: %v", err)
	}

	tamper := func(f func(string) string) string { return f(tok) }
	parts := strings.Split(tok, ".")
	forged := k.SignBoot(BootClaims{Org: "evil", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour)})
	for name, tc := range map[string]struct {
		token, uuid string
		at          time.Time
		reason      string
	}{
		"other machine":  {tok, other, now, ReasonMachine},
		"expired":        {tok, uuid, now.Add(time.Hour), ReasonExpired},
		"long expired":   {tok, uuid, now.Add(100 * time.Hour), ReasonExpired},
		"other key":      {keys(t, 9).SignBoot(claims), uuid, now, ReasonSignature},
		"payload swap":   {parts[0] + "." + strings.Split(forged, ".")[1] + "." + parts[2], uuid, now, ReasonSignature},
		"truncated sig":  {tok[:len(tok)-2], uuid, now, ReasonMalformed},
		"extra part":     {tok + ".x", uuid, now, ReasonMalformed},
		"wrong prefix":   {"pb2" + tok[3:], uuid, now, ReasonMalformed},
		"empty":          {"", uuid, now, ReasonMalformed},
		"credential":     {k.SignCredential("acme", uuid, mrid), uuid, now, ReasonMalformed},
		"huge":           {strings.Repeat("a", 10000), uuid, now, ReasonMalformed},
		"not base64 sig": {tamper(func(s string) string { return parts[0] + "." + parts[1] + ".!!!" }), uuid, now, ReasonMalformed},
	} {
		_, err := k.VerifyBoot(tc.token, tc.uuid, tc.at)
		if ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v (reason %q), want %s", name, err, ReasonOf(err), tc.reason)
		}
	}
}

func TestAgentCredential(t *testing.T) {
	k := keys(t, 1)
	cred := k.SignCredential("acme", uuid, mrid)
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{20,128}$`).MatchString(cred) {
		t.Fatalf("credential %q does not match the renderer's pattern", cred)
	}
	longOrg := strings.Repeat("o", 63)
	if long := k.SignCredential(longOrg, uuid, mrid); len(long) > 128 {
		t.Errorf("credential of a 63-character org is %d characters", len(long))
	}
	got, err := k.VerifyCredential(cred, uuid)
	if err != nil || got != (Credential{Org: "acme", MachineRevisionID: mrid}) {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if _, err := keys(t, 2, 1).VerifyCredential(cred, uuid); err != nil {
		t.Errorf("rotation: %v", err)
	}
	forgedOrg := strings.Replace(cred, "_acme_", "_evil_", 1)
	forgedRev := strings.Replace(cred, mrid, "mr-ffffffffffffffffffff", 1)
	for name, tc := range map[string]struct {
		cred, uuid, reason string
	}{
		"other machine":   {cred, other, ReasonSignature},
		"other org":       {forgedOrg, uuid, ReasonSignature},
		"other revision":  {forgedRev, uuid, ReasonSignature},
		"other key":       {keys(t, 9).SignCredential("acme", uuid, mrid), uuid, ReasonSignature},
		"boot token":      {k.SignBoot(BootClaims{Org: "acme", UUID: uuid, Pool: "p", Revision: 1, Expires: now}), uuid, ReasonMalformed},
		"truncated":       {cred[:len(cred)-1], uuid, ReasonMalformed},
		"bad org":         {"ac1_-x_" + mrid + "_AAAA", uuid, ReasonMalformed},
		"bad revision":    {"ac1_acme_mr-XYZ_AAAA", uuid, ReasonMalformed},
		"empty":           {"", uuid, ReasonMalformed},
		"placeholder":     {"ANVIL_AGENT_CREDENTIAL_PLACEHOLDER_0F6C1B9E2D7A4853_REPLACED_BY_THE_BOOT_SERVICE", uuid, ReasonMalformed},
		"too long":        {cred + strings.Repeat("A", 200), uuid, ReasonMalformed},
		"upper-case uuid": {cred, strings.ToUpper(uuid), ReasonSignature},
	} {
		_, err := k.VerifyCredential(tc.cred, tc.uuid)
		if ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v (reason %q), want %s", name, err, ReasonOf(err), tc.reason)
		}
		if err != nil && strings.Contains(err.Error(), cred) {
			t.Errorf("%s: error leaks the credential", name)
		}
	}
}

func TestParseKeys(t *testing.T) {
	good := "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=" // 32 bytes of 0x01
	k, err := ParseKeys(good + ", AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI")
	if err != nil {
		t.Fatal(err)
	}
	if k.SignBoot(BootClaims{Org: "a", UUID: uuid, Pool: "p", Revision: 1, Expires: now}) !=
		keys(t, 1).SignBoot(BootClaims{Org: "a", UUID: uuid, Pool: "p", Revision: 1, Expires: now}) {
		t.Error("the first key does not sign")
	}
	for _, s := range []string{"", "short", good + ",***", "AQEB"} {
		if _, err := ParseKeys(s); err == nil {
			t.Errorf("ParseKeys(%q) accepted", s)
		} else if strings.Contains(err.Error(), s) && s != "" {
			t.Errorf("error quotes the key material: %v", err)
		}
	}
}

func FuzzVerifyBoot(f *testing.F) {
	k := keys(f, 1)
	f.Add(k.SignBoot(BootClaims{Org: "acme", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour)}), uuid)
	f.Add("pb1..", uuid)
	f.Add("pb1.YWNtZXx8fHx8.AAAA", "")
	f.Fuzz(func(t *testing.T, tok, id string) {
		c, err := k.VerifyBoot(tok, id, now)
		if err == nil {
			// Only a token this key signed can verify: re-signing the
			// claims gives the same token.
			if k.SignBoot(c) != tok || c.UUID != id {
				t.Fatalf("accepted %q as %+v", tok, c)
			}
		} else if ReasonOf(err) == "" {
			t.Fatalf("refusal without a reason: %v", err)
		}
	})
}

func FuzzVerifyCredential(f *testing.F) {
	k := keys(f, 1)
	f.Add(k.SignCredential("acme", uuid, mrid), uuid)
	f.Add("ac1_acme_"+mrid+"_", uuid)
	f.Add("ac1___", "")
	f.Fuzz(func(t *testing.T, cred, id string) {
		c, err := k.VerifyCredential(cred, id)
		if err == nil && k.SignCredential(c.Org, id, c.MachineRevisionID) != cred {
			t.Fatalf("accepted %q as %+v", cred, c)
		}
	})
}
