package ports

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
)

// document is the OpenAPI document as the gateway serves it.
func document(t *testing.T) map[string]any {
	t.Helper()
	rec := httptest.NewRecorder()
	NewHandler(Deps{}).ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestOperationIDs: every operation has an operationId of its own from
// the table (generated clients name their methods after them; a route
// missing from it gets a snake_case fallback, refused here), and one tag
// from the table of resource families.
func TestOperationIDs(t *testing.T) {
	tags := map[string]bool{}
	for _, td := range tagDocs {
		tags[td[0]] = true
	}
	seen := map[string]string{}
	camel := regexp.MustCompile(`^[a-z][A-Za-z]+$`)
	doc := document(t)
	ops := 0
	for path, item := range doc["paths"].(map[string]any) {
		for method, o := range item.(map[string]any) {
			ops++
			op := o.(map[string]any)
			id, _ := op["operationId"].(string)
			where := strings.ToUpper(method) + " " + path
			if !camel.MatchString(id) {
				t.Errorf("%s: operationId %q is not lowerCamelCase", where, id)
			}
			if other, dup := seen[id]; dup {
				t.Errorf("operationId %s is both %s and %s", id, other, where)
			}
			seen[id] = where
			tl, _ := op["tags"].([]any)
			if len(tl) != 1 || !tags[tl[0].(string)] {
				t.Errorf("%s: tags %v, want one of the resource families", where, tl)
			}
		}
	}
	if ops != len(operationIDs) {
		t.Errorf("the document has %d operations, the table %d names", ops, len(operationIDs))
	}
	if doc["openapi"] != openAPIVersion {
		t.Errorf("openapi %v", doc["openapi"])
	}
}

// TestDocumentIs30: nothing of OpenAPI 3.1 is left in the document (type
// arrays, contentEncoding), which 3.0 readers refuse.
func TestDocumentIs30(t *testing.T) {
	b, _ := json.Marshal(document(t))
	for _, bad := range []string{`"type":[`, `"contentEncoding"`, `"const"`, `"null"`} {
		if strings.Contains(string(b), bad) {
			t.Errorf("the document contains %s", bad)
		}
	}
}

// TestQueryParametersTyped: limits are integers with their bounds, times
// are date-times, filters with a fixed set of values are enums.
func TestQueryParametersTyped(t *testing.T) {
	doc := document(t)
	param := func(path, method, name string) map[string]any {
		op := doc["paths"].(map[string]any)[path].(map[string]any)[method].(map[string]any)
		for _, p := range op["parameters"].([]any) {
			if pm := p.(map[string]any); pm["name"] == name {
				return pm
			}
		}
		t.Fatalf("%s %s has no parameter %s", method, path, name)
		return nil
	}
	schema := func(p map[string]any) map[string]any { return p["schema"].(map[string]any) }
	if s := schema(param("/api/v1/orgs/{org}/machines", "get", "limit")); s["type"] != "integer" || s["maximum"] != 1000.0 || s["default"] != 100.0 {
		t.Errorf("machines limit: %v", s)
	}
	if s := schema(param("/api/v1/orgs/{org}/rollouts", "get", "limit")); s["maximum"] != 500.0 || s["default"] != 50.0 {
		t.Errorf("rollouts limit: %v", s)
	}
	if s := schema(param("/api/v1/orgs/{org}/events", "get", "since")); s["format"] != "date-time" {
		t.Errorf("since: %v", s)
	}
	if p := param("/api/v1/orgs/{org}/events", "get", "after"); p["deprecated"] != true {
		t.Errorf("events after: %v", p)
	}
	if s := schema(param("/api/v1/orgs/{org}/operations", "get", "kind")); len(s["enum"].([]any)) != len(operationKinds) {
		t.Errorf("kind: %v", s)
	}
	if s := schema(param("/api/v1/orgs/{org}/machines", "get", "status")); s["$ref"] != "#/components/schemas/MachineStatus" {
		t.Errorf("machine status: %v", s)
	}
	for _, list := range []string{"/api/v1/orgs", "/api/v1/orgs/{org}/tokens", "/api/v1/orgs/{org}/enrollment-tokens", "/api/v1/orgs/{org}/machines",
		"/api/v1/orgs/{org}/clusters", "/api/v1/orgs/{org}/pools", "/api/v1/orgs/{org}/pools/{pool}/revisions", "/api/v1/orgs/{org}/rollouts",
		"/api/v1/orgs/{org}/operations", "/api/v1/orgs/{org}/events"} {
		param(list, "get", "cursor")
		param(list, "get", "limit")
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	if s := schemas["MachineStatus"].(map[string]any); len(s["enum"].([]any)) < 10 {
		t.Errorf("MachineStatus: %v", s)
	}
	// Every answer with items is a list in the one envelope, and takes
	// ?cursor= and ?limit=.
	lists := 0
	for path, item := range doc["paths"].(map[string]any) {
		get, ok := item.(map[string]any)["get"].(map[string]any)
		if !ok {
			continue
		}
		content, _ := get["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)
		js, _ := content["application/json"].(map[string]any)
		if js == nil {
			continue
		}
		s, _ := js["schema"].(map[string]any)
		if ref, ok := s["$ref"].(string); ok {
			s = schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
		}
		props, _ := s["properties"].(map[string]any)
		items, ok := props["items"].(map[string]any)
		if !ok {
			continue
		}
		lists++
		if items["type"] != "array" || items["nullable"] != nil {
			t.Errorf("GET %s: items %v, want an array, never null", path, items)
		}
		if next, ok := props["next"].(map[string]any); !ok || next["type"] != "string" {
			t.Errorf("GET %s: a list without next", path)
		}
		param(path, "get", "cursor")
		param(path, "get", "limit")
	}
	if lists != 10 {
		t.Errorf("%d lists in the document, want 10", lists)
	}
}

// TestVersionRouteMatchesFile: a build without -ldflags reports the
// VERSION file's version.
func TestVersionRouteMatchesFile(t *testing.T) {
	b, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	fileVersion := strings.TrimSpace(string(b))
	rec := httptest.NewRecorder()
	NewHandler(Deps{}).ServeHTTP(rec, httptest.NewRequest("GET", "/version", nil))
	var v map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if v["version"] != fileVersion || v["git_commit"] == "" || !strings.HasPrefix(v["go_version"], "go") || len(v) != 3 {
		t.Fatalf("GET /version: %v", v)
	}
}
