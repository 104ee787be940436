package signing

import (
	"bytes"
	"regexp"
	"strconv"
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

// legacyBoot makes a per-boot token of the version before (pb1, no issue
// time), as a boot service before revocation issued it.
func legacyBoot(k Keys, c BootClaims) string {
	payload := strings.Join([]string{c.Org, c.UUID, c.Pool, strconv.FormatUint(c.Revision, 10), strconv.FormatInt(c.Expires.Unix(), 10)}, "|")
	return "pb1." + b64.EncodeToString([]byte(payload)) + "." + b64.EncodeToString(mac(k.boot[0], "pb1", payload))
}

// legacyCredential makes an agent credential of the version before (ac1).
func legacyCredential(k Keys, org, uuid, mrid string) string {
	return "ac1_" + org + "_" + mrid + "_" + b64.EncodeToString(mac(k.agent[0], "ac1", org, uuid, mrid)[:24])
}

func TestBootToken(t *testing.T) {
	k := keys(t, 1)
	claims := BootClaims{Org: "acme", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour), Issued: now.Add(1234 * time.Millisecond)}
	tok := k.SignBoot(claims)
	if !regexp.MustCompile(`^pb2\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`).MatchString(tok) {
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

	// The issue time is kept to the millisecond.
	sub := claims
	sub.Issued = claims.Issued.Add(999 * time.Microsecond)
	if got, err := k.VerifyBoot(k.SignBoot(sub), uuid, now); err != nil || !got.Issued.Equal(claims.Issued) {
		t.Errorf("sub-millisecond issue time: %v %v", got.Issued, err)
	}
	// A token of the version before still verifies, without an issue time.
	legacy := claims
	legacy.Issued = time.Time{}
	if got, err := k.VerifyBoot(legacyBoot(k, legacy), uuid, now); err != nil || got != legacy {
		t.Errorf("pb1 token: %+v %v", got, err)
	}

	tamper := func(f func(string) string) string { return f(tok) }
	parts := strings.Split(tok, ".")
	forged := k.SignBoot(BootClaims{Org: "evil", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour), Issued: now})
	legacyParts := strings.Split(legacyBoot(k, legacy), ".")
	later := claims
	later.Issued = now.Add(time.Hour)
	laterPayload := strings.Split(k.SignBoot(later), ".")[1]
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
		"wrong prefix":   {"pb3" + tok[3:], uuid, now, ReasonMalformed},
		"later issue":    {parts[0] + "." + laterPayload + "." + parts[2], uuid, now, ReasonSignature},
		"pb1 as pb2":     {"pb2." + legacyParts[1] + "." + legacyParts[2], uuid, now, ReasonSignature},
		"pb2 as pb1":     {"pb1." + parts[1] + "." + parts[2], uuid, now, ReasonSignature},
		"empty":          {"", uuid, now, ReasonMalformed},
		"credential":     {k.SignCredential("acme", uuid, mrid, now), uuid, now, ReasonMalformed},
		"huge":           {strings.Repeat("a", 10000), uuid, now, ReasonMalformed},
		"not base64 sig": {tamper(func(s string) string { return parts[0] + "." + parts[1] + ".!!!" }), uuid, now, ReasonMalformed},
		"line break":     {parts[0] + "." + parts[1][:4] + "\r\n" + parts[1][4:] + "." + parts[2], uuid, now, ReasonMalformed},
	} {
		_, err := k.VerifyBoot(tc.token, tc.uuid, tc.at)
		if ReasonOf(err) != tc.reason {
			t.Errorf("%s: %v (reason %q), want %s", name, err, ReasonOf(err), tc.reason)
		}
	}
}

func TestAgentCredential(t *testing.T) {
	k := keys(t, 1)
	issued := now.Add(1234 * time.Millisecond)
	cred := k.SignCredential("acme", uuid, mrid, issued)
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{20,128}$`)
	if !pattern.MatchString(cred) {
		t.Fatalf("credential %q does not match the renderer's pattern", cred)
	}
	longOrg := strings.Repeat("o", 63)
	for _, at := range []time.Time{issued, time.Date(2059, 5, 1, 0, 0, 0, 0, time.UTC), time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if long := k.SignCredential(longOrg, uuid, mrid, at); !pattern.MatchString(long) {
			t.Errorf("credential of a 63-character org issued at %s is %d characters", at, len(long))
		}
	}
	got, err := k.VerifyCredential(cred, uuid)
	if err != nil || got != (Credential{Org: "acme", MachineRevisionID: mrid, Issued: issued}) || got.Legacy() {
		t.Fatalf("verify: %+v %v", got, err)
	}
	if _, err := keys(t, 2, 1).VerifyCredential(cred, uuid); err != nil {
		t.Errorf("rotation: %v", err)
	}
	// Same machine, same machine revision, another moment: another
	// credential (that is what lets a revocation tell them apart).
	again := k.SignCredential("acme", uuid, mrid, issued.Add(time.Millisecond))
	if again == cred {
		t.Error("credentials issued at different times are equal")
	}
	// A credential of the version before still verifies, without an issue
	// time.
	legacy := legacyCredential(k, "acme", uuid, mrid)
	if got, err := k.VerifyCredential(legacy, uuid); err != nil || got != (Credential{Org: "acme", MachineRevisionID: mrid}) || !got.Legacy() {
		t.Errorf("ac1 credential: %+v %v", got, err)
	}
	p, _ := ParseCredential(cred)
	forgedOrg := strings.Replace(cred, "_acme_", "_evil_", 1)
	forgedRev := strings.Replace(cred, mrid, "mr-ffffffffffffffffffff", 1)
	forgedAt := strings.Replace(cred, "_"+p.issued+"_", "_"+strconv.FormatInt(issued.Add(time.Hour).UnixMilli(), 36)+"_", 1)
	upperAt := strings.Replace(cred, "_"+p.issued+"_", "_"+strings.ToUpper(p.issued)+"_", 1)
	zeroAt := strings.Replace(cred, "_"+p.issued+"_", "_0"+p.issued+"_", 1)
	legacySig := legacy[strings.LastIndex(legacy, "_")+1:]
	for name, tc := range map[string]struct {
		cred, uuid, reason string
	}{
		"other machine":   {cred, other, ReasonSignature},
		"other org":       {forgedOrg, uuid, ReasonSignature},
		"other revision":  {forgedRev, uuid, ReasonSignature},
		"later issue":     {forgedAt, uuid, ReasonSignature},
		"upper-case time": {upperAt, uuid, ReasonMalformed},
		"leading zero":    {zeroAt, uuid, ReasonMalformed},
		"zero time":       {"ac2_acme_" + mrid + "_0_" + strings.Repeat("A", 24), uuid, ReasonMalformed},
		"ac2 as ac1":      {strings.Replace(strings.Replace(cred, "ac2_", "ac1_", 1), "_"+p.issued+"_", "_", 1), uuid, ReasonMalformed},
		"ac1 as ac2":      {"ac2_acme_" + mrid + "_" + p.issued + "_" + legacySig, uuid, ReasonMalformed},
		"other key":       {keys(t, 9).SignCredential("acme", uuid, mrid, issued), uuid, ReasonSignature},
		"boot token":      {k.SignBoot(BootClaims{Org: "acme", UUID: uuid, Pool: "p", Revision: 1, Expires: now}), uuid, ReasonMalformed},
		"truncated":       {cred[:len(cred)-1], uuid, ReasonMalformed},
		"bad org":         {"ac2_-x_" + mrid + "_1_AAAA", uuid, ReasonMalformed},
		"bad revision":    {"ac2_acme_mr-XYZ_1_AAAA", uuid, ReasonMalformed},
		"empty":           {"", uuid, ReasonMalformed},
		"placeholder":     {"ANVIL_AGENT_CREDENTIAL_PLACEHOLDER_0F6C1B9E2D7A4853_REPLACED_BY_THE_BOOT_SERVICE", uuid, ReasonMalformed},
		"too long":        {cred + strings.Repeat("A", 200), uuid, ReasonMalformed},
		"line break":      {cred[:len(cred)-4] + "\n" + cred[len(cred)-4:], uuid, ReasonMalformed},
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
	claims := BootClaims{Org: "acme", UUID: uuid, Pool: "workers", Revision: 3, Expires: now.Add(time.Hour), Issued: now}
	f.Add(k.SignBoot(claims), uuid)
	claims.Issued = time.Time{}
	f.Add(legacyBoot(k, claims), uuid)
	f.Add("pb2..", uuid)
	f.Add("pb1.YWNtZXx8fHx8.AAAA", "")
	f.Add("pb2.YWNtZXx8fHx8fA.AAAA", "")
	f.Fuzz(func(t *testing.T, tok, id string) {
		c, err := k.VerifyBoot(tok, id, now)
		if err == nil {
			// Only a token this key signed can verify: re-signing the
			// claims gives the same token.
			resigned := k.SignBoot(c)
			if c.Issued.IsZero() {
				resigned = legacyBoot(k, c)
			}
			if resigned != tok || c.UUID != id {
				t.Fatalf("accepted %q as %+v", tok, c)
			}
		} else if ReasonOf(err) == "" {
			t.Fatalf("refusal without a reason: %v", err)
		}
	})
}

func FuzzVerifyCredential(f *testing.F) {
	k := keys(f, 1)
	f.Add(k.SignCredential("acme", uuid, mrid, now), uuid)
	f.Add(legacyCredential(k, "acme", uuid, mrid), uuid)
	f.Add("ac2_acme_"+mrid+"_1_", uuid)
	f.Add("ac1_acme_"+mrid+"_", uuid)
	f.Add("ac2____", "")
	f.Fuzz(func(t *testing.T, cred, id string) {
		c, err := k.VerifyCredential(cred, id)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		resigned := k.SignCredential(c.Org, id, c.MachineRevisionID, c.Issued)
		if c.Legacy() {
			resigned = legacyCredential(k, c.Org, id, c.MachineRevisionID)
		}
		if resigned != cred {
			t.Fatalf("accepted %q as %+v", cred, c)
		}
	})
}

// FuzzParseCredential: whatever the input, the parser does not panic,
// refuses with a reason, and what it accepts has one spelling (writing the
// parts back gives the input), fits the renderer's pattern and names a
// valid organization and machine revision.
func FuzzParseCredential(f *testing.F) {
	k := keys(f, 1)
	f.Add(k.SignCredential("acme", uuid, mrid, now))
	f.Add(k.SignCredential(strings.Repeat("o", 63), uuid, mrid, time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)))
	f.Add(legacyCredential(k, "acme", uuid, mrid))
	f.Add("ac2_acme_" + mrid + "_lx9k2p1a_" + strings.Repeat("_", 24))
	f.Add("ac2_acme_" + mrid + "_LX9K2P1A_" + strings.Repeat("A", 24))
	f.Add("ac2_acme_" + mrid + "_+1_" + strings.Repeat("A", 24))
	f.Add("ac1_acme_" + mrid + "_" + strings.Repeat("-", 32))
	f.Add("ac2_")
	f.Add("")
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{20,128}$`)
	f.Fuzz(func(t *testing.T, cred string) {
		p, err := ParseCredential(cred)
		if err != nil {
			if ReasonOf(err) != ReasonMalformed {
				t.Fatalf("refusal %v (reason %q)", err, ReasonOf(err))
			}
			return
		}
		if p.String() != cred || !pattern.MatchString(cred) || !orgID(p.Org) || !MachineRevisionID(p.MachineRevisionID) {
			t.Fatalf("accepted %q as %+v", cred, p)
		}
		if (p.Version == "ac2") == p.Legacy() {
			t.Fatalf("%q: version %s with issue time %v", cred, p.Version, p.Issued)
		}
	})
}
