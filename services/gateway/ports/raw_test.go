package ports

import "testing"

func TestSplitMachineReply(t *testing.T) {
	for _, c := range []struct {
		raw, machine string
		version      uint64
		ok           bool
	}{
		{`{"machine":{"org":"acme","uuid":"u"},"version":42}`, `{"org":"acme","uuid":"u"}`, 42, true},
		{`{"machine":{"hostname":"a,\"version\":7}"},"version":9}`, `{"hostname":"a,\"version\":7}"}`, 9, true},
		{`{"machine":{"reboot":{"version":3}},"version":5}`, `{"reboot":{"version":3}}`, 5, true},
		{`{"machine":{},"version":1,"events":["x"]}`, ``, 0, false},
		{`{"version":1,"machine":{}}`, ``, 0, false},
		{`{ "machine": {}, "version": 1 }`, ``, 0, false},
		{`{"machine":{},"version":-1}`, ``, 0, false},
		{`{"machine":{},"version":}`, ``, 0, false},
		{`{"machine":`, ``, 0, false},
		{``, ``, 0, false},
	} {
		m, v, ok := splitMachineReply([]byte(c.raw))
		if ok != c.ok || (ok && (string(m) != c.machine || v != c.version)) {
			t.Errorf("%s: %q %d %v", c.raw, m, v, ok)
		}
	}
}
