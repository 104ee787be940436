package service_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

// Every route × (no token, viewer, operator, admin, another org's admin).
func TestAccessControlMatrix(t *testing.T) {
	s := startStack(t)
	tn := s.tenants()
	// a machine and a token to address
	uuid := uuidN(1)
	if r := s.do("POST", "/api/v1/orgs/acme/machines", tn.operator, map[string]any{"uuid": uuid, "hostname": "w1"}, nil, nil); r.status != 201 {
		t.Fatalf("pre-register: %d %s", r.status, r.body)
	}
	var toks struct{ Items []struct{ ID string } }
	s.do("GET", "/api/v1/orgs/acme/tokens", tn.admin, nil, nil, &toks)
	s.waitMachines()

	var doc struct {
		Paths map[string]map[string]struct {
			Description string
		}
	}
	var raw []byte
	s.do("GET", "/openapi.json", "", nil, nil, &raw)
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{"viewer": 1, "operator": 2, "admin": 3, "platform": 4}
	callers := []struct {
		name, tok string
		rank      int
		otherOrg  bool
	}{
		{"none", "", 0, false},
		{"viewer", tn.viewer, 1, false},
		{"operator", tn.operator, 2, false},
		{"admin", tn.admin, 3, false},
		{"other-admin", tn.otherAdmin, 3, true},
	}
	routes := 0
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/api/") {
			continue
		}
		for method, op := range ops {
			routes++
			need := strings.TrimSuffix(strings.TrimPrefix(op.Description, "Needs the "), " role.")
			url := strings.NewReplacer("{org}", "acme", "{uuid}", uuid, "{id}", "no-such-token", "{name}", "c1", "{pool}", "p1", "{n}", "1").Replace(path)
			for _, c := range callers {
				// A body that is valid JSON but mostly empty: the point is who
				// gets past authorization, not what the command does.
				var body any
				if method == "post" || method == "patch" || method == "put" {
					body = map[string]any{}
				}
				r := s.do(strings.ToUpper(method), url, c.tok, body, nil, nil)
				switch {
				case c.tok == "":
					if r.status != http.StatusUnauthorized {
						t.Errorf("%s %s with no token: %d, want 401", method, path, r.status)
					}
				case c.otherOrg && strings.Contains(path, "{org}"):
					if r.status != http.StatusNotFound {
						t.Errorf("%s %s with another org's admin: %d, want 404", method, path, r.status)
					}
					if strings.Contains(string(r.body), `"w1"`) || strings.Contains(string(r.body), "hostname") || strings.Contains(string(r.body), "GLOBEX") {
						t.Errorf("%s %s leaked data across organizations: %s", method, path, r.body)
					}
				case rank[need] > c.rank:
					if r.status != http.StatusForbidden {
						t.Errorf("%s %s as %s (needs %s): %d, want 403", method, path, c.name, need, r.status)
					}
				default:
					if r.status == 401 || r.status == 403 || strings.Contains(string(r.body), "organization \\\"acme\\\" does not exist") {
						t.Errorf("%s %s as %s (needs %s) was refused: %d %s", method, path, c.name, need, r.status, r.body)
					}
				}
			}
		}
	}
	if routes < 20 {
		t.Fatalf("only %d API routes in the document", routes)
	}
	// GET /api/v1/orgs shows another org's admin only its own org
	var list struct{ Items []regapi.Org }
	s.do("GET", "/api/v1/orgs", tn.otherAdmin, nil, nil, &list)
	if len(list.Items) != 1 || list.Items[0].ID != "globex" {
		t.Fatalf("globex admin sees %+v", list.Items)
	}
}
