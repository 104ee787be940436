package ports

import (
	"encoding"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/fields/values"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// openAPIVersion is the document's OpenAPI version. 3.0.3, not 3.1: the
// document uses nothing of 3.1 (nullable fields are "nullable: true", the
// one value that is a number or a string is a oneOf), and 3.0 is what
// client generators read best (oapi-codegen reads it without a gap; its
// 3.1 support is partial, as is that of several others). See
// docs/api.md, "The OpenAPI document".
const openAPIVersion = "3.0.3"

// openAPI builds the OpenAPI document from the route table, with the
// schemas reflected from the very types the handlers encode, so the document
// cannot drift from the API.
func openAPI(routes []route) []byte {
	g := &schemas{defs: map[string]any{}, types: map[string]reflect.Type{}}
	paths := map[string]map[string]any{}
	pathParam := regexp.MustCompile(`\{([a-z]+)\}`)
	problem := map[string]any{"application/problem+json": map[string]any{"schema": g.of(reflect.TypeOf(Problem{}))}}
	for _, rt := range routes {
		op := map[string]any{
			"summary":     rt.Summary,
			"operationId": operationID(rt.Method, rt.Path),
			"tags":        []any{tagOf(rt.Path)},
			"responses": map[string]any{
				strconv.Itoa(rt.Status): g.response(rt),
				"default":               map[string]any{"description": "An RFC 9457 problem", "content": problem},
			},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.Path, -1) {
			params = append(params, pathParameter(m[1], rt.Path))
		}
		for _, q := range rt.Query {
			params = append(params, g.queryParameter(rt, q))
		}
		if rt.Conditional || rt.Method == http.MethodPatch || rt.Method == http.MethodPut || rt.Method == http.MethodDelete || rt.Method == http.MethodPost && strings.Contains(rt.Path, "{uuid}") {
			params = append(params, map[string]any{"name": "If-Match", "in": "header", "schema": map[string]any{"type": "string"},
				"description": "Make the write conditional on the ETag of a previous answer; a stale one gets 412."})
		}
		if rt.Method == http.MethodPost {
			params = append(params, map[string]any{"name": "Idempotency-Key", "in": "header", "schema": map[string]any{"type": "string", "maxLength": 255},
				"description": "A retry with the same key gets the first answer."})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.Request != nil {
			op["requestBody"] = map[string]any{"required": !rt.BodyOptional, "content": map[string]any{
				"application/json": map[string]any{"schema": g.body(reflect.TypeOf(rt.Request), rt.NotInBody)}}}
		}
		if rt.Min != domain.RoleNone {
			op["security"] = []any{map[string]any{"bearer": []any{}}}
			op["description"] = "Needs the " + string(rt.Min) + " role."
		}
		if paths[rt.Path] == nil {
			paths[rt.Path] = map[string]any{}
		}
		paths[rt.Path][strings.ToLower(rt.Method)] = op
	}
	text := map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}
	plain := func(path, summary string, status map[string]string) {
		responses := map[string]any{}
		for code, what := range status {
			responses[code] = map[string]any{"description": what, "content": text}
		}
		paths[path] = map[string]any{"get": map[string]any{"summary": summary, "operationId": operationID("GET", path), "tags": []any{tagOf(path)},
			"responses": responses}}
	}
	plain("/healthz", "Liveness", map[string]string{"200": "Alive"})
	plain("/readyz", "Readiness: every dependency answers", map[string]string{"200": "Ready", "503": "Not ready"})
	// /metrics is on the admin listener (--admin-addr), not this one.
	paths["/openapi.json"] = map[string]any{"get": map[string]any{"summary": "This document", "operationId": operationID("GET", "/openapi.json"), "tags": []any{tagOf("/openapi.json")},
		"responses": map[string]any{"200": map[string]any{"description": "The OpenAPI " + openAPIVersion + " document",
			"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}}}}}
	var tags []any
	for _, t := range tagDocs {
		tags = append(tags, map[string]any{"name": t[0], "description": t[1]})
	}
	doc := map[string]any{
		"openapi": openAPIVersion,
		"info": map[string]any{"title": "anvil API", "version": "v1",
			"description": "The control plane for bare-metal Kubernetes worker fleets. Errors are RFC 9457 problems; times are RFC 3339 UTC. " +
				"Every list answers {\"items\": [...], \"next\": \"<cursor>\"}: pass next back as ?cursor= until it is absent."},
		"tags":  tags,
		"paths": paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // the document is built from static types; a failure is a bug caught by every test
	}
	return b
}

// operationIDs names every operation. They are stable: generated clients
// name their methods after them (TestOperationIDs checks that every route
// has one and that they are unique).
var operationIDs = map[string]string{
	"GET /api/v1/orgs":                                           "listOrgs",
	"POST /api/v1/orgs":                                          "createOrg",
	"GET /api/v1/orgs/{org}":                                     "getOrg",
	"PATCH /api/v1/orgs/{org}":                                   "renameOrg",
	"GET /api/v1/orgs/{org}/tokens":                              "listTokens",
	"POST /api/v1/orgs/{org}/tokens":                             "createToken",
	"DELETE /api/v1/orgs/{org}/tokens/{id}":                      "revokeToken",
	"GET /api/v1/orgs/{org}/enrollment-tokens":                   "listEnrollmentTokens",
	"POST /api/v1/orgs/{org}/enrollment-tokens":                  "createEnrollmentToken",
	"DELETE /api/v1/orgs/{org}/enrollment-tokens/{id}":           "revokeEnrollmentToken",
	"GET /api/v1/orgs/{org}/machines":                            "listMachines",
	"POST /api/v1/orgs/{org}/machines":                           "preregisterMachine",
	"GET /api/v1/orgs/{org}/machines/{uuid}":                     "getMachine",
	"PATCH /api/v1/orgs/{org}/machines/{uuid}":                   "updateMachine",
	"DELETE /api/v1/orgs/{org}/machines/{uuid}":                  "deleteMachine",
	"POST /api/v1/orgs/{org}/machines/{uuid}/assign":             "assignMachine",
	"POST /api/v1/orgs/{org}/machines/{uuid}/unassign":           "unassignMachine",
	"POST /api/v1/orgs/{org}/machines/{uuid}/force-unassign":     "forceUnassignMachine",
	"POST /api/v1/orgs/{org}/machines/{uuid}/maintenance/on":     "enterMachineMaintenance",
	"POST /api/v1/orgs/{org}/machines/{uuid}/maintenance/off":    "exitMachineMaintenance",
	"POST /api/v1/orgs/{org}/machines/{uuid}/abort-deletion":     "abortMachineDeletion",
	"GET /api/v1/orgs/{org}/machines/{uuid}/revisions":           "getMachineRevisions",
	"GET /api/v1/orgs/{org}/machines/{uuid}/startup-log":         "getMachineStartupLog",
	"GET /api/v1/orgs/{org}/clusters":                            "listClusters",
	"POST /api/v1/orgs/{org}/clusters":                           "createCluster",
	"GET /api/v1/orgs/{org}/clusters/{name}":                     "getCluster",
	"PATCH /api/v1/orgs/{org}/clusters/{name}":                   "updateCluster",
	"PUT /api/v1/orgs/{org}/clusters/{name}/kubeconfig":          "rotateClusterKubeconfig",
	"PUT /api/v1/orgs/{org}/clusters/{name}/bootstrap-token":     "rotateClusterBootstrapToken",
	"DELETE /api/v1/orgs/{org}/clusters/{name}":                  "deleteCluster",
	"GET /api/v1/orgs/{org}/pools":                               "listPools",
	"POST /api/v1/orgs/{org}/pools":                              "createPool",
	"GET /api/v1/orgs/{org}/pools/{pool}":                        "getPool",
	"PUT /api/v1/orgs/{org}/pools/{pool}":                        "updatePool",
	"DELETE /api/v1/orgs/{org}/pools/{pool}":                     "deletePool",
	"GET /api/v1/orgs/{org}/pools/{pool}/revisions":              "listPoolRevisions",
	"GET /api/v1/orgs/{org}/pools/{pool}/revisions/{n}":          "getPoolRevision",
	"GET /api/v1/orgs/{org}/pools/{pool}/revisions/{n}/diff":     "diffPoolRevisions",
	"GET /api/v1/orgs/{org}/pools/{pool}/revisions/{n}/ignition": "getPoolRevisionIgnition",
	"POST /api/v1/orgs/{org}/pools/{pool}/revisions/{n}/apply":   "applyPoolRevision",
	"GET /api/v1/orgs/{org}/rollouts":                            "listRollouts",
	"POST /api/v1/orgs/{org}/rollouts":                           "startRollout",
	"GET /api/v1/orgs/{org}/rollouts/{id}":                       "getRollout",
	"POST /api/v1/orgs/{org}/rollouts/{id}/pause":                "pauseRollout",
	"POST /api/v1/orgs/{org}/rollouts/{id}/resume":               "resumeRollout",
	"POST /api/v1/orgs/{org}/rollouts/{id}/abort":                "abortRollout",
	"POST /api/v1/orgs/{org}/rollouts/{id}/retry":                "retryRollout",
	"GET /api/v1/orgs/{org}/operations":                          "listOperations",
	"GET /api/v1/orgs/{org}/operations/{id}":                     "getOperation",
	"GET /api/v1/orgs/{org}/operations/{id}/log":                 "getOperationLog",
	"GET /api/v1/orgs/{org}/events":                              "listEvents",
	"GET /api/v1/catalog":                                        "getCatalog",
	"POST /api/v1/catalog/versions":                              "addCatalogVersion",
	"GET /version":                                               "getVersion",
	"GET /healthz":                                               "getLiveness",
	"GET /readyz":                                                "getReadiness",
	"GET /openapi.json":                                          "getOpenAPI",
}

// operationID is the route's operationId; one missing from the table
// (TestOperationIDs fails) falls back to one made from the path.
func operationID(method, path string) string {
	if id, ok := operationIDs[method+" "+path]; ok {
		return id
	}
	p := strings.NewReplacer("/api/v1/", "", "/", "_", "{", "", "}", "", "-", "_", ".", "_").Replace(path)
	return strings.ToLower(method) + "_" + p
}

// tagDocs are the resource families, one tag each, in the order a
// reader meets them.
var tagDocs = [][2]string{
	{"orgs", "Organizations"},
	{"tokens", "API tokens of an organization"},
	{"enrollment-tokens", "Enrollment tokens: machines register themselves with them"},
	{"machines", "Machines: registration, assignment to pools, maintenance, deletion, their revisions and startup logs"},
	{"clusters", "Kubernetes clusters the pools join"},
	{"pools", "Machine pools and their revisions"},
	{"rollouts", "Rollouts of pool revisions"},
	{"operations", "Operations (rollouts, maintenance, unassignments, deletions) and their logs"},
	{"events", "The audit log"},
	{"catalog", "The platform-wide Kubernetes version catalog"},
	{"system", "Version, health, metrics and this document"},
}

// tagOf is the resource family of a path: the segment after the
// organization, the organizations themselves, the catalog, or system.
func tagOf(path string) string {
	if rest, ok := strings.CutPrefix(path, "/api/v1/orgs/{org}/"); ok {
		seg, _, _ := strings.Cut(rest, "/")
		return seg
	}
	switch {
	case path == "/api/v1/orgs" || path == "/api/v1/orgs/{org}":
		return "orgs"
	case strings.HasPrefix(path, "/api/v1/catalog"):
		return "catalog"
	}
	return "system"
}

// pathParameter documents a path parameter by its name.
func pathParameter(name, path string) map[string]any {
	p := map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
	switch name {
	case "org":
		p["description"] = "The organization's id."
	case "uuid":
		p["description"] = "The machine's SMBIOS UUID."
	case "name":
		p["description"] = "The cluster's name."
	case "pool":
		p["description"] = "The pool's name."
	case "n":
		p["schema"] = map[string]any{"type": "integer", "minimum": 1}
		p["description"] = "The revision's number."
	case "id":
		switch tagOf(path) {
		case "rollouts":
			p["description"] = "The rollout's id."
		case "operations":
			p["description"] = "The operation's id (a rollout's is the rollout's)."
		default:
			p["description"] = "The token's id."
		}
	}
	return p
}

// queryParameter documents a query parameter by its name (and, for the
// few whose meaning depends on it, the route's path).
func (g *schemas) queryParameter(rt route, name string) map[string]any {
	str := map[string]any{"type": "string"}
	p := map[string]any{"name": name, "in": "query", "schema": str}
	switch name {
	case "limit":
		l := rt.Limit
		if l.Max == 0 {
			l = listPage
		}
		p["schema"] = map[string]any{"type": "integer", "minimum": 1, "maximum": l.Max, "default": l.Default}
		p["description"] = fmt.Sprintf("At most this many items (default %d, at most %d).", l.Default, l.Max)
	case "cursor":
		p["description"] = "The next of the previous page; absent: the first page."
	case "after":
		if tagOf(rt.Path) == "events" {
			p["deprecated"] = true
			p["description"] = "The former name of cursor, still accepted."
		} else { // an operation's log
			p["schema"] = map[string]any{"type": "integer", "minimum": 0, "default": 0}
			p["description"] = "The index of the first entry (0: the start): the next of a previous page."
		}
	case "since", "until":
		p["schema"] = map[string]any{"type": "string", "format": "date-time"}
		p["description"] = map[string]string{"since": "Events at or after this time.", "until": "Events before this time."}[name]
	case "at":
		p["description"] = "As it was then: an RFC 3339 time, or a stream sequence (a version, such as an ETag's)."
	case "status":
		switch tagOf(rt.Path) {
		case "machines":
			p["schema"] = g.of(reflect.TypeFor[regapi.Status]())
		case "rollouts":
			p["schema"] = map[string]any{"type": "string", "enum": stringsOf(rolloutStatuses...)}
			p["description"] = `A rollout status, or "active" (not over).`
		default:
			p["schema"] = map[string]any{"type": "string", "enum": stringsOf(operationStatuses...)}
			p["description"] = `An operation status (a rollout's, or a machine operation's), or "active" (not over).`
		}
	case "kind":
		p["schema"] = map[string]any{"type": "string", "enum": stringsOf(operationKinds...)}
	case "policy":
		p["schema"] = g.of(reflect.TypeFor[regapi.DeletionPolicy]())
		p["description"] = "graceful (default): drain, then remove the node; unsafe: remove the node without draining; forced: remove the machine at once."
	case "against":
		p["schema"] = map[string]any{"type": "integer", "minimum": 1}
		p["description"] = "The revision to compare with."
	case "pool":
		p["description"] = "Only this pool's."
	case "cluster":
		p["description"] = "Only this cluster's."
	case "selector":
		p["description"] = "A Kubernetes label selector over the machines' labels, such as rack=r3,zone!=b."
	case "aggregate":
		p["description"] = "<type> or <type>/<id>, such as machine/4c4c4544-…"
	case "type":
		p["description"] = "Event types, comma-separated."
	case "actor":
		p["description"] = "An exact actor, a kind (token, service, machine, platform), or a kind and name (token:t1, service:rollout)."
	}
	return p
}

func stringsOf(vs ...string) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

func enumOf[T ~string](vs ...T) []any {
	out := make([]any, 0, len(vs))
	for _, v := range vs {
		if v != "" {
			out = append(out, string(v))
		}
	}
	return out
}

// enumTypes are the string types with a fixed set of values: each is a
// schema of its own, which the fields of that type refer to.
var enumTypes = map[reflect.Type][]any{
	reflect.TypeFor[regapi.Status]():             enumOf(regapi.Statuses()...),
	reflect.TypeFor[regapi.DeletionPolicy]():     enumOf(regapi.DeletionGraceful, regapi.DeletionUnsafe, regapi.DeletionForced),
	reflect.TypeFor[regapi.DeletionPhase]():      enumOf(regapi.PhaseStarted, regapi.PhaseCompleted, regapi.PhaseAborting, regapi.PhaseFailed),
	reflect.TypeFor[regapi.Role]():               enumOf(regapi.RoleViewer, regapi.RoleOperator, regapi.RoleAdmin),
	reflect.TypeFor[regapi.TokenStatus]():        enumOf(regapi.TokenActive, regapi.TokenExpired, regapi.TokenRevoked),
	reflect.TypeFor[regapi.TokenKind]():          enumOf(regapi.KindAPI, regapi.KindEnrollment),
	reflect.TypeFor[rolloutapi.Status]():         enumOf(rolloutapi.Statuses...),
	reflect.TypeFor[bootapi.InstructionStatus](): enumOf(bootapi.StatusPending, bootapi.StatusAccepted, bootapi.StatusDone, bootapi.StatusSkipped, bootapi.StatusFailed, bootapi.StatusSuperseded, bootapi.StatusWithdrawn, bootapi.StatusExpired),
}

// fieldEnums are plain string fields with a fixed set of values: by the
// struct and the field's JSON name.
var fieldEnums = map[reflect.Type]map[string][]any{
	reflect.TypeFor[rolloutapi.Operation](): {"kind": stringsOf(operationKinds...)},
}

// body is a request body's schema, inlined, without the fields that come
// from the path, headers or query.
func (g *schemas) body(t reflect.Type, notInBody []string) map[string]any {
	if t.Kind() != reflect.Struct || t == timeType {
		return g.of(t)
	}
	s := g.structSchema(t)
	props := s["properties"].(map[string]any)
	var required []any
	for _, f := range notInBody {
		delete(props, f)
	}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if _, kept := props[r.(string)]; kept {
				required = append(required, r)
			}
		}
		s["required"] = required
		if len(required) == 0 {
			delete(s, "required")
		}
	}
	return s
}

func (g *schemas) response(rt route) map[string]any {
	r := map[string]any{"description": http.StatusText(rt.Status)}
	if rt.Status != http.StatusNoContent && rt.Response != nil {
		content := map[string]any{"application/json": map[string]any{"schema": g.of(reflect.TypeOf(rt.Response))}}
		if rt.Stream {
			content["text/event-stream"] = map[string]any{"schema": map[string]any{"type": "string",
				"description": "With Accept: text/event-stream: one event per log entry (id: the entry's index, data: the entry as JSON), then an `end` event."}}
		}
		r["content"] = content
	}
	return r
}

var (
	jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textMarshaler = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

// schemas reflects OpenAPI 3.0 schemas from Go types as encoding/json
// encodes them; named structs and enums become components.
type schemas struct {
	defs  map[string]any
	types map[string]reflect.Type // which type each component is, against two types of one name
}

// intOrPercent is the one schema of the types of that name (the revisions
// API's and libs/fields/values'), which encode alike.
const intOrPercent = "IntOrPercent"

// component returns a reference to the component for t, building it
// with build the first time.
func (g *schemas) component(t reflect.Type, name string, build func() map[string]any) map[string]any {
	ref := map[string]any{"$ref": "#/components/schemas/" + name}
	if other, seen := g.types[name]; seen {
		if other != t && name != intOrPercent {
			panic(fmt.Sprintf("openapi: %s and %s would both be the schema %s", other, t, name))
		}
		return ref
	}
	g.types[name] = t
	g.defs[name] = map[string]any{} // placeholder against recursion
	g.defs[name] = build()
	return ref
}

// of is the schema of a Go type.
func (g *schemas) of(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	}
	if values, ok := enumTypes[t]; ok {
		return g.component(t, defName(t), func() map[string]any { return map[string]any{"type": "string", "enum": values} })
	}
	if !implements(t, jsonMarshaler) && implements(t, textMarshaler) {
		return map[string]any{"type": "string"} // encoding/json writes a TextMarshaler as a string (a Duration's "15m0s")
	}
	if implements(t, jsonMarshaler) {
		if t.Name() == "IntOrPercent" { // 3 or "25%", as Kubernetes writes it
			return g.component(t, intOrPercent, func() map[string]any {
				return map[string]any{"description": `A count (3) or a percentage ("25%").`, "oneOf": []any{
					map[string]any{"type": "integer", "minimum": 0},
					map[string]any{"type": "string", "pattern": `^[0-9]+%$`},
				}}
			})
		}
		if t.Kind() == reflect.Array || t.Kind() == reflect.String {
			return map[string]any{"type": "string"} // e.g. a hash that encodes as hex
		}
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64", "minimum": 0}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"} // base64
		}
		// A nil slice encodes as null.
		return map[string]any{"type": "array", "nullable": true, "items": g.of(t.Elem())}
	case reflect.Array:
		return map[string]any{"type": "array", "items": g.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "nullable": true, "additionalProperties": g.of(t.Elem())}
	case reflect.Struct:
		name := defName(t)
		if name == "" {
			return g.structSchema(t)
		}
		return g.component(t, name, func() map[string]any { return g.structSchema(t) })
	}
	return map[string]any{}
}

// schemaNames keep the component names of types that moved from a
// service's domain into its api package: generated clients name their
// types after the components (anvilapi.MachineStatus), so a move must not
// rename them.
var schemaNames = map[reflect.Type]string{
	reflect.TypeFor[regapi.Status]():          "MachineStatus",
	reflect.TypeFor[regapi.DeletionPolicy]():  "MachineDeletionPolicy",
	reflect.TypeFor[regapi.DeletionPhase]():   "MachineDeletionPhase",
	reflect.TypeFor[regapi.Deletion]():        "MachineDeletion",
	reflect.TypeFor[regapi.Failure]():         "MachineFailure",
	reflect.TypeFor[regapi.Hardware]():        "MachineHardware",
	reflect.TypeFor[regapi.Disk]():            "MachineDisk",
	reflect.TypeFor[regapi.NIC]():             "MachineNIC",
	reflect.TypeFor[regapi.Reboot]():          "MachineReboot",
	reflect.TypeFor[regapi.Role]():            "OrgRole",
	reflect.TypeFor[regapi.TokenStatus]():     "OrgTokenStatus",
	reflect.TypeFor[regapi.TokenInfo]():       "OrgTokenInfo",
	reflect.TypeFor[regapi.TokenKind]():       "TokenKind",
	reflect.TypeFor[rolloutapi.Status]():      "RolloutStatus",
	reflect.TypeFor[rolloutapi.Strategy]():    "RolloutStrategy",
	reflect.TypeFor[rolloutapi.Exclusion]():   "RolloutExclusion",
	reflect.TypeFor[rolloutapi.CheckResult](): "RolloutCheckResult",
	reflect.TypeFor[rolloutapi.DrainBlock]():  "RolloutDrainBlock",
	reflect.TypeFor[rolloutapi.Machine]():     "OperationMachine",
	reflect.TypeFor[rolloutapi.Progress]():    "OperationProgress",
	reflect.TypeFor[rolloutapi.Condition]():   "OperationCondition",
	reflect.TypeFor[rolloutapi.Entry]():       "OperationEntry",
	reflect.TypeFor[values.Window]():          "PoolWindow",
	reflect.TypeFor[values.Remediation]():     "PoolRemediation",
}

func defName(t reflect.Type) string {
	if t.Name() == "" {
		return ""
	}
	if name, ok := schemaNames[t]; ok {
		return name
	}
	pkg := t.PkgPath()
	if i := strings.LastIndex(pkg, "/"); i >= 0 {
		pkg = pkg[i+1:]
	}
	if pkg == "ports" {
		return t.Name()
	}
	if pkg == "api" { // several services have an api package: name it after the service
		svc := strings.TrimSuffix(t.PkgPath(), "/api")
		svc = svc[strings.LastIndex(svc, "/")+1:]
		return strings.ToUpper(svc[:1]) + svc[1:] + "Api" + t.Name()
	}
	return strings.ToUpper(pkg[:1]) + pkg[1:] + t.Name()
}

func (g *schemas) structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []any
	enums := fieldEnums[t]
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" || !f.IsExported() && !f.Anonymous {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft)
					continue
				}
			}
			if name == "" {
				name = f.Name
			}
			if values, ok := enums[name]; ok && f.Type.Kind() == reflect.String {
				props[name] = map[string]any{"type": "string", "enum": values}
			} else {
				props[name] = g.of(f.Type)
			}
			if name == "items" && f.Type.Kind() == reflect.Slice {
				// A list's items: every list answers an array, never null
				// (the gateway's tests validate every answer against the
				// document), so clients need no nil check.
				delete(props[name].(map[string]any), "nullable")
			}
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer {
				required = append(required, name)
			}
		}
	}
	walk(t)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}
