package ipxe

import (
	"testing"
)

// A boot script whose per-boot token is appended in place (AppendBoot)
// is the one AppendScript makes of IgnitionURL, for every base and delay
// and again once its start is kept; a token or a base that AppendScript
// would not take is refused, leaving dst as it was.
func TestAppendBootIsAppendScript(t *testing.T) {
	p := preparedBoot(t)
	const tok = "pb2.YWNtZXw0YzRj.ootLpjiWUX4wY5jYHG89XhT4sHUUfxolc_5K2Z2Ucg0"
	sign := func(t string) func([]byte) []byte { return func(b []byte) []byte { return append(b, t...) } }
	retry := MachineURL(base, token, 1)
	for _, b := range []string{base, base + "/", "https://other.example:8443"} {
		for _, delay := range []int{0, 5, 300, 5} {
			want, err := p.AppendScript(nil, IgnitionURL(b, uuid, tok), delay, retry)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.AppendBoot(make([]byte, 0, 16), b, uuid, sign(tok), delay, retry)
			if err != nil || string(got) != string(want) {
				t.Fatalf("base %s, delay %d: %v\n%s\nwant\n%s", b, delay, err, got, want)
			}
		}
	}
	dst := []byte("kept")
	for _, bad := range []string{"", "a b", "a&b", "${uuid}", "a\nshell", "a%20"} {
		if got, err := p.AppendBoot(dst, base, uuid, sign(bad), 1, retry); err == nil || string(got) != "kept" {
			t.Errorf("AppendBoot took the token %q (or changed dst: %q)", bad, got)
		}
	}
	if got, err := p.AppendBoot(dst, "http://x/a b", uuid, sign(tok), 1, retry); err == nil || string(got) != "kept" {
		t.Errorf("AppendBoot took a base with a space (or changed dst: %q)", got)
	}
	for _, bad := range []string{"http://x/other?uuid=1", base + "/ignition?uuid=1&token=a b", base + "/ignition?uuid=${uuid}"} {
		if _, err := p.AppendScript(nil, bad, 1, retry); err == nil {
			t.Errorf("AppendScript took %q", bad)
		}
	}
}
