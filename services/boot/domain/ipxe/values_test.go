package ipxe

import (
	"net/url"
	"strings"
	"testing"
)

// values reads a query without escapes itself; it must read what
// url.ParseQuery reads.
func FuzzValuesMatchParseQuery(f *testing.F) {
	for _, s := range []string{
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&attempt=3",
		"uuid=a&uuid=b", "&&uuid&=x&mac=", "token==a=b&attempt=", "a=b&c", "uuid=${uuid}&mac=${net0/mac:hexhyp}",
		"uuid=%41&mac=x+y", "a;b=c", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > MaxQueryLen {
			return
		}
		got, gotRef := values(raw)
		v, err := url.ParseQuery(raw)
		for i, name := range paramNames {
			if got.get(i) != v.Get(name) || got.n[i] != len(v[name]) {
				t.Fatalf("%q: %s is %q (%d times), url.ParseQuery reads %q (%d times)", raw, name, got.get(i), got.n[i], v.Get(name), len(v[name]))
			}
		}
		if (err != nil) != (gotRef != nil && strings.Contains(gotRef.Message, "malformed")) {
			t.Fatalf("%q: refusal %v, url.ParseQuery error %v", raw, gotRef, err)
		}
	})
}
