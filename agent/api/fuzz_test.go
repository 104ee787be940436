package api

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeInstructions checks that nothing the server sends can crash the
// agent, and that whatever is accepted as valid is something the agent can act on.
func FuzzDecodeInstructions(f *testing.F) {
	for _, seed := range []string{
		`{"instructions":[{"id":"i-1","kind":"reboot","revision":"r-1","issued_at":"2026-01-02T03:04:05Z"}]}`,
		`{"instructions":[{"id":"i-2","kind":"reapply","revision":"r-1"},{"id":"i-3","kind":"nuke","revision":"r"}]}`,
		`{"instructions":[{"id":"","kind":"reboot"},{"id":1},null,"x",[]]}`,
		`{"instructions":[{"id":"i","kind":"reboot","revision":"r","issued_at":"2026-13-45T99:00:00Z"}]}`,
		`{"instructions":null}`,
		`{"instructions":{}}`,
		`{"Instructions":[]}`,
		`{"instructions":[{"id":"\u0000","kind":"reboot","revision":"r"}]}`,
		`{"instructions":[{"id":"é","kind":"reboot","revision":"\ud800"}]}`,
		`[]`,
		`null`,
		``,
		`{"instructions":[{"id":"i","kind":"reboot","revision":"r","id":"j"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		valid, invalid, err := DecodeInstructions(body)
		if err != nil {
			if len(valid)+len(invalid) != 0 {
				t.Fatalf("error %v with results", err)
			}
			return
		}
		for _, in := range valid {
			if in.ID == "" || in.Revision == "" || len(in.ID) > MaxIDLength || len(in.Revision) > MaxIDLength {
				t.Fatalf("accepted unusable instruction %+v", in)
			}
			if !printable(in.ID, MaxIDLength) || !printable(in.Revision, MaxIDLength) {
				t.Fatalf("accepted unprintable instruction %+v", in)
			}
			if in.Kind != KindReboot && in.Kind != KindReapply {
				t.Fatalf("accepted unknown kind %+v", in)
			}
		}
		for _, bad := range invalid {
			if bad.Reason == "" {
				t.Fatalf("invalid element without a reason: %+v", bad)
			}
			if bad.ID != "" && !printable(bad.ID, MaxIDLength) {
				t.Fatalf("invalid element with an unusable id: %+v", bad)
			}
		}
		// What we accept must survive our own encoding unchanged, since the
		// agent persists instructions in its state file.
		if len(valid) > 0 {
			raw, err := json.Marshal(Instructions{Instructions: valid})
			if err != nil {
				t.Fatal(err)
			}
			again, bad, err := DecodeInstructions(raw)
			if err != nil || len(bad) != 0 || len(again) != len(valid) {
				t.Fatalf("round trip: %v %v %v", again, bad, err)
			}
			for i := range valid {
				if again[i].ID != valid[i].ID || again[i].Kind != valid[i].Kind || again[i].Revision != valid[i].Revision || !again[i].IssuedAt.Equal(valid[i].IssuedAt) {
					t.Fatalf("round trip changed %+v into %+v", valid[i], again[i])
				}
			}
		}
	})
}

func FuzzDecodeProblem(f *testing.F) {
	f.Add([]byte(`{"type":"about:blank","title":"Forbidden","status":403,"errors":[{"field":"f","reason":"r"}]}`))
	f.Add([]byte(`{"status":"401"}`))
	f.Add([]byte(`<html>bad gateway</html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = DecodeProblem(body).String()
	})
}
