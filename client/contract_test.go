package client_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
)

// operation is how the client covers one operation of the document.
type operation struct {
	method string // the Client method
	body   any    // the request body's client type, if it has one
	query  any    // the filter whose `query` tags are query parameters
	// notInSchema are JSON fields of the answer's client type that this
	// operation's schema lacks, with the reason.
	notInSchema map[string]string
}

// operations maps every operationId of /openapi.json to the client.
var operations = map[string]operation{
	"getVersion":   {method: "Version"},
	"getLiveness":  {method: "Healthz"},
	"getReadiness": {method: "Readyz"},
	"getOpenAPI":   {method: "OpenAPI"},

	"getCatalog":        {method: "GetCatalog"},
	"addCatalogVersion": {method: "AddCatalogVersion"},

	"listOrgs":  {method: "ListOrgs", query: client.ListOptions{}},
	"createOrg": {method: "CreateOrg", body: client.OrgCreate{}},
	"getOrg":    {method: "GetOrg"},
	"renameOrg": {method: "RenameOrg"},

	"listTokens":            {method: "ListTokens", query: client.ListOptions{}},
	"createToken":           {method: "CreateToken", body: client.TokenCreate{}},
	"revokeToken":           {method: "RevokeToken"},
	"listEnrollmentTokens":  {method: "ListEnrollmentTokens", query: client.ListOptions{}},
	"createEnrollmentToken": {method: "CreateEnrollmentToken", body: client.EnrollmentTokenCreate{}},
	"revokeEnrollmentToken": {method: "RevokeEnrollmentToken"},

	"listMachines": {method: "ListMachines", query: client.MachineFilter{}, notInSchema: map[string]string{
		"version": "a machine in a list carries no version (Machine.Version is 0 there)",
		"deleted": "a listed machine is never deleted"}},
	"preregisterMachine":      {method: "PreregisterMachine", body: client.MachinePreregister{}},
	"getMachine":              {method: "GetMachine"},
	"updateMachine":           {method: "UpdateMachine", body: client.MachinePatch{}},
	"deleteMachine":           {method: "DeleteMachine"},
	"assignMachine":           {method: "AssignMachine"},
	"unassignMachine":         {method: "UnassignMachine"},
	"forceUnassignMachine":    {method: "ForceUnassignMachine"},
	"enterMachineMaintenance": {method: "EnterMaintenance"},
	"exitMachineMaintenance":  {method: "ExitMaintenance"},
	"abortMachineDeletion":    {method: "AbortDeletion"},
	"getMachineRevisions":     {method: "GetMachineRevisions"},
	"getMachineStartupLog":    {method: "GetMachineStartupLog"},

	"listClusters":                {method: "ListClusters", query: client.ListOptions{}},
	"createCluster":               {method: "CreateCluster", body: client.ClusterCreate{}},
	"getCluster":                  {method: "GetCluster"},
	"updateCluster":               {method: "UpdateCluster", body: client.ClusterPatch{}},
	"rotateClusterKubeconfig":     {method: "RotateClusterKubeconfig"},
	"rotateClusterBootstrapToken": {method: "RotateClusterBootstrapToken"},
	"deleteCluster":               {method: "DeleteCluster"},

	"listPools":               {method: "ListPools", query: client.PoolFilter{}},
	"createPool":              {method: "CreatePool", body: client.PoolCreate{}},
	"getPool":                 {method: "GetPool"},
	"updatePool":              {method: "UpdatePool", body: client.PoolUpdate{}},
	"deletePool":              {method: "DeletePool"},
	"listPoolRevisions":       {method: "ListPoolRevisions", query: client.ListOptions{}},
	"getPoolRevision":         {method: "GetPoolRevision"},
	"diffPoolRevisions":       {method: "DiffPoolRevisions"},
	"getPoolRevisionIgnition": {method: "GetPoolRevisionIgnition"},
	"applyPoolRevision":       {method: "ApplyPoolRevision"},

	"listRollouts":  {method: "ListRollouts", query: client.RolloutFilter{}},
	"startRollout":  {method: "StartRollout", body: client.RolloutStart{}},
	"getRollout":    {method: "GetRollout"},
	"pauseRollout":  {method: "PauseRollout"},
	"resumeRollout": {method: "ResumeRollout"},
	"abortRollout":  {method: "AbortRollout"},
	"retryRollout":  {method: "RetryRollout"},

	"listOperations":  {method: "ListOperations", query: client.OperationFilter{}},
	"getOperation":    {method: "GetOperation"},
	"getOperationLog": {method: "GetOperationLog"},

	"listEvents": {method: "ListEvents", query: client.EventFilter{}},
}

// TestClientCoversDocument checks the hand-kept client against the
// document the gateway serves: every operation has a method; the JSON
// field names of the client's types (answers, request bodies, their
// nested types) exist in the operation's schemas, and the schemas'
// required fields exist in the client's types; every filter field is a
// query parameter of its operation.
func TestClientCoversDocument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := newClient(t, "", "").OpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ct := reflect.TypeFor[*client.Client]()
	seen := map[string]bool{}
	for path, item := range doc.Paths {
		for verb, op := range item {
			where := strings.ToUpper(verb) + " " + path + " (" + op.OperationID + ")"
			seen[op.OperationID] = true
			cov, ok := operations[op.OperationID]
			if !ok {
				t.Errorf("%s: no client method in the operations table", where)
				continue
			}
			m, ok := ct.MethodByName(cov.method)
			if !ok {
				t.Errorf("%s: the client has no method %s", where, cov.method)
				continue
			}
			if m.Type.NumIn() < 2 || m.Type.In(1) != reflect.TypeFor[context.Context]() {
				t.Errorf("%s: %s does not take a context first", where, cov.method)
			}
			// the answer
			if m.Type.NumOut() == 2 {
				out := m.Type.Out(0)
				if s := op.answer(); s != nil && out.Kind() == reflect.Pointer {
					doc.check(t, where+" answer", out.Elem(), s, cov.notInSchema, true)
				}
			}
			// the request body
			if cov.body != nil {
				if op.RequestBody == nil {
					t.Errorf("%s: the client sends a body, the operation takes none", where)
				} else {
					doc.check(t, where+" body", reflect.TypeOf(cov.body), op.RequestBody.Content["application/json"].Schema, nil, true)
				}
			}
			// the filter's query parameters
			if cov.query != nil {
				params := map[string]bool{}
				for _, p := range op.Parameters {
					if p.In == "query" {
						params[p.Name] = true
					}
				}
				for _, name := range queryTags(reflect.TypeOf(cov.query)) {
					if !params[name] {
						t.Errorf("%s: the client's %T sends ?%s=, which the operation does not take", where, cov.query, name)
					}
				}
			}
		}
	}
	for id := range operations {
		if !seen[id] {
			t.Errorf("the operations table names %s, which the document does not have", id)
		}
	}
	if len(seen) < 50 {
		t.Fatalf("only %d operations in the document", len(seen))
	}
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
	OneOf                []*schema          `json:"oneOf"`
}

type document struct {
	Paths      map[string]map[string]op `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type content map[string]struct {
	Schema *schema `json:"schema"`
}

type op struct {
	OperationID string `json:"operationId"`
	Parameters  []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	RequestBody *struct {
		Content content `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content content `json:"content"`
	} `json:"responses"`
}

func (d document) resolve(s *schema) *schema {
	for s != nil && s.Ref != "" {
		s = d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	return s
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// check compares a client type with a schema: every JSON field of t is a
// property (but those in skip, at any depth), and, if required, every
// required property is a field of t.
func (d document) check(t *testing.T, where string, typ reflect.Type, s *schema, skip map[string]string, required bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	s = d.resolve(s)
	if s == nil || typ == timeType || typ == rawType || typ == reflect.TypeFor[client.IntOrPercent]() {
		return
	}
	switch typ.Kind() {
	case reflect.Slice, reflect.Array:
		if s.Type != "array" {
			t.Errorf("%s: the client has a list, the schema a %s", where, s.Type)
			return
		}
		d.check(t, where+"[]", typ.Elem(), s.Items, skip, required)
	case reflect.Map:
		if s.Type != "object" || s.AdditionalProperties == nil {
			t.Errorf("%s: the client has a map, the schema %+v", where, s)
			return
		}
		d.check(t, where+"{}", typ.Elem(), s.AdditionalProperties, skip, required)
	case reflect.Struct:
		if s.Type != "object" {
			t.Errorf("%s: the client has an object, the schema a %q", where, s.Type)
			return
		}
		fields := jsonFields(typ)
		for name, ft := range fields {
			p, ok := s.Properties[name]
			if !ok {
				if _, skipped := skip[name]; !skipped {
					t.Errorf("%s: the client's %s has %q, which the schema does not", where, typ.Name(), name)
				}
				continue
			}
			d.check(t, where+"."+name, ft, p, skip, required)
		}
		if required {
			for _, name := range s.Required {
				if _, ok := fields[name]; !ok {
					t.Errorf("%s: the schema requires %q, which the client's %s lacks", where, name, typ.Name())
				}
			}
		}
	}
}

// jsonFields are a struct's JSON field names and types, embedded structs'
// included, as encoding/json sees them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, ft := range jsonFields(f.Type) {
				out[n] = ft
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func queryTags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, queryTags(f.Type)...)
		} else if q := f.Tag.Get("query"); q != "" {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// answer is the JSON schema of the operation's success.
func (o op) answer() *schema {
	for code, r := range o.Responses {
		if strings.HasPrefix(code, "2") {
			if c, ok := r.Content["application/json"]; ok {
				return c.Schema
			}
		}
	}
	return nil
}
