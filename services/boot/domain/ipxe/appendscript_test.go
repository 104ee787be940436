package ipxe

import (
	"testing"
)

// A boot script whose Ignition URL is built in bytes (the prefix, then
// the per-boot token) is the one AppendScript makes of IgnitionURL, and
// an Ignition URL not built that way is refused either way.
func TestAppendScriptURLIsAppendScript(t *testing.T) {
	p := preparedBoot(t)
	const tok = "pb2.YWNtZXw0YzRj.ootLpjiWUX4wY5jYHG89XhT4sHUUfxolc_5K2Z2Ucg0"
	retry := MachineURL(base, token, 1)
	for _, b := range []string{base, base + "/"} {
		u := AppendIgnitionURLPrefix(nil, b, uuid)
		if string(u) != IgnitionURLPrefix(b, uuid) || string(u)+tok != IgnitionURL(b, uuid, tok) {
			t.Fatalf("prefix %q, want %q", u, IgnitionURLPrefix(b, uuid))
		}
		for _, delay := range []int{0, 5, 300} {
			want, err := p.AppendScript(nil, IgnitionURL(b, uuid, tok), delay, retry)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.AppendScriptURL(make([]byte, 0, 16), append(u, tok...), delay, retry)
			if err != nil || string(got) != string(want) {
				t.Fatalf("delay %d: %v\n%s\nwant\n%s", delay, err, got, want)
			}
			if exact, _ := p.AppendScriptURL(nil, append(u, tok...), delay, retry); cap(exact) != len(exact) {
				t.Fatalf("delay %d: size guessed %d, script %d", delay, cap(exact), len(exact))
			}
		}
	}
	for _, bad := range []string{"http://x/other?uuid=1", base + "/ignition?uuid=1&token=a b", base + "/ignition?uuid=${uuid}"} {
		if _, err := p.AppendScript(nil, bad, 1, retry); err == nil {
			t.Errorf("AppendScript took %q", bad)
		}
		if _, err := p.AppendScriptURL(nil, []byte(bad), 1, retry); err == nil {
			t.Errorf("AppendScriptURL took %q", bad)
		}
	}
}
