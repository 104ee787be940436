package service_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzRequestBodies sends arbitrary bodies to every route that takes one,
// against the real stack: no answer may be a 500, and nothing may panic
// (a panic in a handler would surface as a 500 or a dropped connection).
func FuzzRequestBodies(f *testing.F) {
	s := startStack(f)
	tn := s.tenants()
	var raw []byte
	s.do("GET", "/openapi.json", "", nil, nil, &raw)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody any `json:"requestBody"`
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		f.Fatal(err)
	}
	var targets [][2]string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op.RequestBody != nil {
				url := strings.NewReplacer("{org}", "acme", "{uuid}", uuidN(1), "{id}", "x", "{name}", "prod", "{pool}", "workers", "{n}", "1").Replace(path)
				targets = append(targets, [2]string{strings.ToUpper(method), url})
			}
		}
	}
	for _, seed := range []string{`{}`, `{"uuid":"4c4c4544-0035-4b10-8056-000000000001"}`, `[]`, `null`, `{"labels":{"a":"b"}}`,
		`{"name":"p","kubernetes":{"minor":"1.33"},"network":{"vlans":[{"id":-1}]}}`, `{"hostname":1e309}`, "\x00", `{"a":` + strings.Repeat("[", 500)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tg := range targets {
			req, _ := http.NewRequest(tg[0], s.base+tg[1], bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tn.admin)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tg[0], tg[1], err)
			}
			res.Body.Close()
			if res.StatusCode >= 500 && res.StatusCode != 503 {
				t.Fatalf("%s %s with %q: %d", tg[0], tg[1], body, res.StatusCode)
			}
		}
	})
}
