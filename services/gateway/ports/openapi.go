package ports

import (
	"encoding"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/gateway/domain"
)

// openAPI builds the OpenAPI 3.1 document from the route table, with the
// schemas reflected from the very types the handlers encode, so the document
// cannot drift from the API.
func openAPI(routes []route) []byte {
	defs := map[string]any{}
	paths := map[string]map[string]any{}
	pathParam := regexp.MustCompile(`\{([a-z]+)\}`)
	problem := map[string]any{"application/problem+json": map[string]any{"schema": schemaOf(reflect.TypeOf(Problem{}), defs)}}
	for _, rt := range routes {
		op := map[string]any{
			"summary":     rt.Summary,
			"operationId": operationID(rt),
			"responses": map[string]any{
				itoa(rt.Status): response(rt, defs),
				"default":       map[string]any{"description": "An RFC 9457 problem", "content": problem},
			},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.Path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range rt.Query {
			params = append(params, map[string]any{"name": q, "in": "query", "schema": map[string]any{"type": "string"}})
		}
		if rt.Conditional || rt.Method == http.MethodPatch || rt.Method == http.MethodDelete || rt.Method == http.MethodPost && strings.Contains(rt.Path, "{uuid}") {
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
				"application/json": map[string]any{"schema": bodySchema(reflect.TypeOf(rt.Request), rt.NotInBody, defs)}}}
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
	plain := func(summary string) map[string]any {
		return map[string]any{"get": map[string]any{"summary": summary, "operationId": strings.ReplaceAll(strings.ToLower(summary), " ", "_"),
			"responses": map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}},
				"503": map[string]any{"description": "Not ready", "content": map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}}}}}
	}
	paths["/healthz"] = plain("Liveness")
	paths["/readyz"] = plain("Readiness")
	paths["/metrics"] = plain("Prometheus metrics")
	paths["/openapi.json"] = map[string]any{"get": map[string]any{"summary": "This document", "operationId": "openapi",
		"responses": map[string]any{"200": map[string]any{"description": "OpenAPI 3.1", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}}}}}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "anvil API", "version": "v1",
			"description": "The control plane for bare-metal Kubernetes worker fleets. Errors are RFC 9457 problems; times are RFC 3339 UTC."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // the document is built from static types; a failure is a bug caught by every test
	}
	return b
}

// bodySchema is a request body's schema, inlined, without the fields that
// come from the path, headers or query.
func bodySchema(t reflect.Type, notInBody []string, defs map[string]any) map[string]any {
	if t.Kind() != reflect.Struct || t == timeType {
		return schemaOf(t, defs)
	}
	s := structSchema(t, defs)
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

func response(rt route, defs map[string]any) map[string]any {
	r := map[string]any{"description": http.StatusText(rt.Status)}
	if rt.Status != http.StatusNoContent && rt.Response != nil {
		content := map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(rt.Response), defs)}}
		if rt.Stream {
			content["text/event-stream"] = map[string]any{"schema": map[string]any{"type": "string",
				"description": "With Accept: text/event-stream: one event per log entry (id: the entry's index, data: the entry as JSON), then an `end` event."}}
		}
		r["content"] = content
	}
	return r
}

func operationID(rt route) string {
	p := strings.NewReplacer("/api/v1/", "", "/", "_", "{", "", "}", "", "-", "_").Replace(rt.Path)
	return strings.ToLower(rt.Method) + "_" + p
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
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

// schemaOf reflects a JSON Schema (2020-12, as OpenAPI 3.1 uses) from a Go
// type as encoding/json would encode it.
func schemaOf(t reflect.Type, defs map[string]any) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	}
	if !implements(t, jsonMarshaler) && implements(t, textMarshaler) {
		return map[string]any{"type": "string"} // encoding/json writes a TextMarshaler as a string (a Duration's "15m0s")
	}
	if implements(t, jsonMarshaler) {
		if t.Name() == "IntOrPercent" { // 3 or "25%", as Kubernetes writes it
			return map[string]any{"type": []any{"integer", "string"}}
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
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": []any{"array", "null"}, "items": schemaOf(t.Elem(), defs)}
	case reflect.Array:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), defs)}
	case reflect.Map:
		return map[string]any{"type": []any{"object", "null"}, "additionalProperties": schemaOf(t.Elem(), defs)}
	case reflect.Struct:
		name := defName(t)
		if name == "" {
			return structSchema(t, defs)
		}
		ref := map[string]any{"$ref": "#/components/schemas/" + name}
		if _, done := defs[name]; !done {
			defs[name] = map[string]any{} // placeholder against recursion
			defs[name] = structSchema(t, defs)
		}
		return ref
	}
	return map[string]any{}
}

func defName(t reflect.Type) string {
	if t.Name() == "" {
		return ""
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

func structSchema(t reflect.Type, defs map[string]any) map[string]any {
	props := map[string]any{}
	var required []any
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
			props[name] = schemaOf(f.Type, defs)
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
