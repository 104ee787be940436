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
