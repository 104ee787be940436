package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeInstructions(t *testing.T) {
	body := `{"instructions":[
		{"id":"i-1","kind":"reboot","revision":"rev-7","issued_at":"2026-03-01T10:00:00Z"},
		{"id":"i-2","kind":"reapply","revision":"rev-7","issued_at":"2026-03-01T10:00:00.123+01:00","extra":true},
		{"id":"i-3","kind":"format-disk","revision":"rev-7"},
		{"kind":"reboot","revision":"rev-7"},
		{"id":"i-5","kind":"reboot"},
		{"id":"i-6","kind":"reboot","revision":"rev-7","issued_at":"yesterday"},
		{"id":7,"kind":"reboot","revision":"rev-7"},
		{"id":"i-8","kind":["reboot"],"revision":"rev-7"},
		"not an object",
		null
	]}`
	valid, invalid, err := DecodeInstructions([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(valid) != 2 || valid[0].ID != "i-1" || valid[1].Kind != KindReapply {
		t.Fatalf("valid = %+v", valid)
	}
	if want := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC); !valid[0].IssuedAt.Equal(want) {
		t.Errorf("issued_at = %v, want %v", valid[0].IssuedAt, want)
	}
	wantInvalid := []struct{ id, reason string }{
		{"i-3", `unknown instruction kind "format-disk"`},
		{"", "missing id"},
		{"i-5", "missing revision"},
		{"i-6", "not RFC 3339"},
		{"", `field "id" is not a string`},
		{"i-8", `field "kind" is not a string`},
		{"", "not a JSON object"},
		{"", "not a JSON object"},
	}
	if len(invalid) != len(wantInvalid) {
		t.Fatalf("invalid = %+v", invalid)
	}
	for i, w := range wantInvalid {
		if invalid[i].ID != w.id || !strings.Contains(invalid[i].Reason, w.reason) {
			t.Errorf("invalid[%d] = %+v, want id %q reason containing %q", i, invalid[i], w.id, w.reason)
		}
	}
}

func TestDecodeInstructionsMalformed(t *testing.T) {
	for _, body := range []string{``, `null`, `[]`, `{}`, `{"instructions":{}}`, `{"instructions":"x"}`, `{"instructions":[`, `<html>`} {
		if _, _, err := DecodeInstructions([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want ErrMalformed", body, err)
		}
	}
	// An empty or null list is a valid "nothing to do".
	for _, body := range []string{`{"instructions":[]}`, `{"instructions":null}`} {
		valid, invalid, err := DecodeInstructions([]byte(body))
		if err != nil || len(valid)+len(invalid) != 0 {
			t.Errorf("%q: %v %v %v", body, valid, invalid, err)
		}
	}
}

func TestDecodeInstructionsRejectsHostileIDs(t *testing.T) {
	long := strings.Repeat("a", MaxIDLength+1)
	for _, id := range []string{long, "a\nb", "a\x00b"} {
		raw, _ := json.Marshal(map[string]any{"instructions": []any{map[string]string{"id": id, "kind": "reboot", "revision": "r"}}})
		valid, invalid, err := DecodeInstructions(raw)
		if err != nil || len(valid) != 0 || len(invalid) != 1 || invalid[0].ID != "" {
			t.Errorf("id %q: valid=%v invalid=%v err=%v", id, valid, invalid, err)
		}
	}
}

func TestDecodeProblem(t *testing.T) {
	p := DecodeProblem([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"detail":"credential revoked","errors":[{"field":"authorization","reason":"revoked"}]}`))
	if p == nil || p.Status != 401 {
		t.Fatalf("p = %+v", p)
	}
	if got, want := p.String(), "Unauthorized: credential revoked; authorization: revoked"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, body := range []string{"", "oops", "{}", "[1]"} {
		if p := DecodeProblem([]byte(body)); p != nil {
			t.Errorf("%q decoded as %+v", body, p)
		}
	}
}
