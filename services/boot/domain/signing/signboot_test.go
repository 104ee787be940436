package signing

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// SignBoot and AppendBoot build the token in buffers; it must be the token the plain
// construction (joined payload, mac of the strings) makes.
func TestSignBootMatchesItsDefinition(t *testing.T) {
	k, err := NewKeys([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []BootClaims{
		{Org: "acme", UUID: "4c4c4544-0035-4b10-8056-000000000001", Pool: "workers", Revision: 7,
			Expires: time.Unix(1_800_000_000, 0), Issued: time.UnixMilli(1_799_996_400_123)},
		{Org: "a", UUID: "u", Pool: "p"}, // zero times: Issued taken as 1 ms
		{Org: strings.Repeat("o", 63), UUID: strings.Repeat("u", 36), Pool: strings.Repeat("p", 63), Revision: 1<<64 - 1,
			Expires: time.Unix(1<<40, 0), Issued: time.UnixMilli(1 << 50)},
	} {
		payload := strings.Join([]string{c.Org, c.UUID, c.Pool, strconv.FormatUint(c.Revision, 10), strconv.FormatInt(c.Expires.Unix(), 10),
			strconv.FormatInt(max(c.Issued.UnixMilli(), 1), 10)}, "|")
		want := bootPrefix + "." + b64.EncodeToString([]byte(payload)) + "." + b64.EncodeToString(mac(k.boot[0], bootPrefix, payload))
		if got := k.SignBoot(c); got != want {
			t.Errorf("SignBoot(%+v) = %q, want %q", c, got, want)
		}
		if got := string(k.AppendBoot([]byte("url?token="), c)); got != "url?token="+want {
			t.Errorf("AppendBoot(%+v) = %q, want %q", c, got, "url?token="+want)
		}
	}
}

// The tokens and credentials already issued must keep verifying, and
// other replicas (of an older version) must take what this one issues:
// their exact bytes for a fixed key are pinned.
func TestSignedBytesArePinned(t *testing.T) {
	k, err := NewKeys([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "4c4c4544-0035-4b10-8056-000000000001"
	issued := time.UnixMilli(1_799_996_400_123)
	const token = "pb2.YWNtZXw0YzRjNDU0NC0wMDM1LTRiMTAtODA1Ni0wMDAwMDAwMDAwMDF8d29ya2Vyc3w3fDE4MDAwMDAwMDB8MTc5OTk5NjQwMDEyMw.rrPwu11jcQblF4q42_DuWIIlD3EKPLc-XEzLJkUyky4"
	if got := k.SignBoot(BootClaims{Org: "acme", UUID: uuid, Pool: "workers", Revision: 7, Expires: time.Unix(1_800_000_000, 0), Issued: issued}); got != token {
		t.Errorf("per-boot token %q, want %q", got, token)
	}
	if _, err := k.VerifyBoot(token, uuid, issued); err != nil {
		t.Errorf("pinned per-boot token refused: %v", err)
	}
	const cred = "ac2_acme_mr-0123456789abcdef0123_mywndr7f_lv-chTwX8idON_JH53tguxIT"
	if got := k.SignCredential("acme", uuid, "mr-0123456789abcdef0123", issued); got != cred {
		t.Errorf("credential %q, want %q", got, cred)
	}
	if _, err := k.VerifyCredential(cred, uuid); err != nil {
		t.Errorf("pinned credential refused: %v", err)
	}
}
