package command

import (
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

type strictInner struct {
	Minor string `json:"minor"`
}

type strictBase struct {
	ID string `json:"id"`
}

type strictDoc struct {
	strictBase
	DisplayName string            `json:"display_name"`
	ExpiresAt   *time.Time        `json:"expires_at,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Spec        strictInner       `json:"spec"`
	Items       []strictInner     `json:"items,omitempty"`
	Count       int               `json:"count,omitempty"`
}

func TestDecodeIsStrict(t *testing.T) {
	cases := []struct {
		name, body, field, reason string
	}{
		{"trailing brace", `{"display_name":"Acme"}}`, "body", "exactly one JSON value"},
		{"trailing brackets", `{"id":"x"}]]]`, "body", "exactly one JSON value"},
		{"trailing value", `{"id":"x"} {"id":"y"}`, "body", "exactly one JSON value"},
		{"duplicate key", `{"display_name":"a","display_name":"b"}`, "display_name", "given twice"},
		{"duplicate key, case-folded", `{"display_name":"a","Display_Name":"b"}`, "Display_Name", "given twice"},
		{"case-folded key", `{"Display_Name":"a"}`, "Display_Name", `did you mean "display_name"`},
		{"case-folded key of an embedded struct", `{"ID":"a"}`, "ID", `did you mean "id"`},
		{"nested case-folded key", `{"spec":{"MINOR":"1.37"}}`, "spec.MINOR", `did you mean "minor"`},
		{"duplicate key in a list element", `{"items":[{"minor":"1"},{"minor":"1","minor":"2"}]}`, "items.1.minor", "given twice"},
		{"duplicate map key", `{"labels":{"rack":"a","rack":"b"}}`, "labels.rack", "given twice"},
		{"bad time", `{"expires_at":"tomorrow"}`, "expires_at", "RFC 3339"},
		{"wrong type", `{"count":"three"}`, "count", "must be int"},
		{"unknown field", `{"colour":"red"}`, "colour", "not a known field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v strictDoc
			err := Decode([]byte(c.body), &v)
			e := errs.As(err)
			if e == nil || e.Kind != errs.KindValidation || len(e.Fields) == 0 {
				t.Fatalf("%s: want a validation error, got %v", c.body, err)
			}
			if f := e.Fields[0]; f.Field != c.field || !strings.Contains(f.Reason, c.reason) {
				t.Fatalf("%s: got %s: %s; want %s: …%s…", c.body, f.Field, f.Reason, c.field, c.reason)
			}
		})
	}
	// Map keys may differ only in case: they are data, not field names.
	var ok strictDoc
	if err := Decode([]byte(`{"id":"x","labels":{"Rack":"a","rack":"b"}}`), &ok); err != nil || len(ok.Labels) != 2 {
		t.Fatalf("label keys that differ only in case are two labels: %v %v", err, ok.Labels)
	}
	if err := Decode([]byte(" {\"id\":\"x\",\"expires_at\":\"2030-01-02T15:04:05Z\",\"spec\":{\"minor\":\"1.37\"}}\n"), &ok); err != nil || ok.ID != "x" || ok.ExpiresAt == nil {
		t.Fatalf("a clean body: %v %+v", err, ok)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"id":"a"}`, `{"spec":{"minor":"1"}}`, `{"items":[{"minor":"x"}]}`, `{"a":1}}`, `[`, `{"labels":{"a":"b"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v strictDoc
		err := Decode(data, &v)
		if err != nil && !errs.Is(err, errs.KindValidation) {
			t.Fatalf("%q: a decoding failure must be a validation error, got %T %v", data, err, err)
		}
	})
}
