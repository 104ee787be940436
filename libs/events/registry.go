package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
)

// Payload is implemented by every event payload: a plain struct whose
// EventType is a stable dotted name such as "machine.registered".
type Payload interface {
	EventType() string
}

// Upcaster turns a payload stored at schema version v into version v+1.
type Upcaster func(old json.RawMessage) (json.RawMessage, error)

type typeInfo struct {
	name      string
	version   int
	goType    reflect.Type
	upcasters map[int]Upcaster // from version -> to version+1
}

// Registry maps event type names to Go types, so that stored JSON can be
// decoded into the payload a handler expects, upcasting old versions first.
type Registry struct {
	mu     sync.RWMutex
	byName map[string]*typeInfo
	byType map[reflect.Type]*typeInfo
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]*typeInfo{}, byType: map[reflect.Type]*typeInfo{}}
}

// Option configures a registration.
type Option func(*typeInfo)

// WithSchemaVersion declares the current schema version of a payload (default 1).
func WithSchemaVersion(v int) Option { return func(t *typeInfo) { t.version = v } }

// Upcast registers the conversion from schema version `from` to from+1.
func Upcast(from int, fn Upcaster) Option {
	return func(t *typeInfo) { t.upcasters[from] = fn }
}

// Register adds payload types given as zero values (structs or pointers to
// structs). Registering the same name twice with a different Go type panics:
// it is a programming error caught by any test that builds the registry.
func (r *Registry) Register(payload Payload, opts ...Option) {
	rt := reflect.TypeOf(payload)
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	ti := &typeInfo{name: payload.EventType(), version: 1, goType: rt, upcasters: map[int]Upcaster{}}
	for _, o := range opts {
		o(ti)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.byName[ti.name]; ok && old.goType != rt {
		panic(fmt.Sprintf("events: type name %q registered for %v and %v", ti.name, old.goType, rt))
	}
	r.byName[ti.name] = ti
	r.byType[rt] = ti
}

// RegisterAll registers every zero value in payloads (as returned by the
// domain packages' EventTypes functions).
func (r *Registry) RegisterAll(payloads []any) {
	for _, p := range payloads {
		pl, ok := p.(Payload)
		if !ok {
			panic(fmt.Sprintf("events: %T has no EventType method", p))
		}
		r.Register(pl)
	}
}

// Known reports whether name is a registered event type.
func (r *Registry) Known(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.byName[name]
	return ok
}

// versionOf returns the schema version new events of this payload get.
func (r *Registry) versionOf(p Payload) (string, int, error) {
	rt := reflect.TypeOf(p)
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	r.mu.RLock()
	ti, ok := r.byType[rt]
	r.mu.RUnlock()
	if !ok {
		return "", 0, fmt.Errorf("events: payload type %v (%q) is not registered", rt, p.EventType())
	}
	return ti.name, ti.version, nil
}

// UnknownTypeError is returned for an envelope whose type is not registered.
type UnknownTypeError struct{ Type string }

func (e *UnknownTypeError) Error() string { return fmt.Sprintf("unknown event type %q", e.Type) }

// DecodeError is returned when a payload does not decode into its Go type.
type DecodeError struct {
	Type    string
	Version int
	Err     error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("event %s v%d: payload does not decode: %v", e.Type, e.Version, e.Err)
}
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode returns the envelope's payload as a value of its registered Go type
// (not a pointer), upcast to the current schema version.
func (r *Registry) Decode(env *Envelope) (any, error) {
	r.mu.RLock()
	ti, ok := r.byName[env.Type]
	r.mu.RUnlock()
	if !ok {
		return nil, &UnknownTypeError{Type: env.Type}
	}
	raw := env.Payload
	v := env.SchemaVersion
	if v == 0 {
		v = 1
	}
	if v > ti.version {
		return nil, &DecodeError{Type: env.Type, Version: v, Err: fmt.Errorf("schema version is newer than this binary knows (%d)", ti.version)}
	}
	for ; v < ti.version; v++ {
		up, ok := ti.upcasters[v]
		if !ok {
			return nil, &DecodeError{Type: env.Type, Version: v, Err: fmt.Errorf("no upcaster from version %d", v)}
		}
		var err error
		if raw, err = up(raw); err != nil {
			return nil, &DecodeError{Type: env.Type, Version: v, Err: err}
		}
	}
	ptr := reflect.New(ti.goType)
	if err := json.Unmarshal(raw, ptr.Interface()); err != nil {
		return nil, &DecodeError{Type: env.Type, Version: v, Err: err}
	}
	return ptr.Elem().Interface(), nil
}
