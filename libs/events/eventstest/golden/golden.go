// Package golden freezes the JSON encoding of stored event payloads. A
// stored event is read back by every later binary, so a field added,
// renamed, removed or retyped in its Go type changes the meaning of
// history; these checks make such a change fail a test until its golden
// file is regenerated on purpose (and an upcaster written if old events
// need one).
//
// Each payload type has testdata/events/<event type>.json holding a value
// with every field set. The check decodes it into the Go type (unknown
// fields refused), re-encodes it and compares (compacted) byte for byte,
// which catches a field renamed, removed or retyped; and it compares the
// file with a value of the type filled reflectively, which also catches a
// field added. The filled values derive from each field's JSON path, not
// its Go name, so a Go type may be renamed or moved as long as its JSON
// stays the same.
package golden

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Dir is where a package keeps its golden events, relative to its directory.
var Dir = filepath.Join("testdata", "events")

type payload interface{ EventType() string }

// Events checks every payload type (zero values, as the domain packages'
// EventTypes functions return them) against dir/<event type>.json, and
// that dir holds no file for a type not in payloads. With update it
// writes the files from the filled values instead, and removes files of
// types no longer listed.
func Events(t *testing.T, dir string, payloads []any, update bool) {
	t.Helper()
	if len(payloads) == 0 {
		t.Fatal("golden: no event types given")
	}
	types := map[string]reflect.Type{}
	for _, p := range payloads {
		pl, ok := p.(payload)
		if !ok {
			t.Fatalf("golden: %T has no EventType method", p)
		}
		rt := reflect.TypeOf(p)
		if rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		if old, dup := types[pl.EventType()]; dup && old != rt {
			t.Fatalf("golden: event type %q is both %v and %v", pl.EventType(), old, rt)
		}
		types[pl.EventType()] = rt
	}
	if update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(types))
	for n := range types {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { checkOne(t, filepath.Join(dir, name+".json"), types[name], update) })
	}

	stale, err := orphans(dir, types)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stale {
		if update {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			t.Logf("removed %s: its event type is not listed any more", f)
			continue
		}
		t.Errorf("%s is the golden file of an event type that is not listed: stored events of that type would "+
			"no longer decode. List the type again, or remove the file if no such event was ever stored", f)
	}
}

// orphans are the golden files in dir of no type in types.
func orphans(dir string, types map[string]reflect.Type) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []string
	for _, f := range files {
		if _, ok := types[strings.TrimSuffix(filepath.Base(f), ".json")]; !ok {
			out = append(out, f)
		}
	}
	return out, err
}

func checkOne(t *testing.T, file string, rt reflect.Type, update bool) {
	if update {
		if err := Write(file, rt); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := Check(file, rt); err != nil {
		t.Errorf("%v\nIf the change is intended (and events stored with the old encoding still read back, or an "+
			"upcaster converts them), regenerate the file with: go test -run TestEventsGolden -update", err)
	}
}

// Write writes the golden file of rt: a filled value, indented.
func Write(file string, rt reflect.Type) error {
	want, err := encodeFilled(rt)
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(want, '\n'), 0o644)
}

// Check compares rt with its golden file: the file must decode into rt
// without unknown fields, encode again to the same bytes, and equal a
// filled value of rt.
func Check(file string, rt reflect.Type) error {
	want, err := encodeFilled(rt)
	if err != nil {
		return err
	}
	golden, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("no golden file for %v: %w", rt, err)
	}
	stored, err := compact(golden)
	if err != nil {
		return fmt.Errorf("%s is not JSON: %w", file, err)
	}
	decoded := reflect.New(rt)
	dec := json.NewDecoder(bytes.NewReader(golden))
	dec.DisallowUnknownFields()
	if err := dec.Decode(decoded.Interface()); err != nil {
		return fmt.Errorf("%s does not decode into %v: %w\nA stored event of this type would not read back the same: "+
			"was a field renamed, removed or retyped?", file, rt, err)
	}
	again, err := json.Marshal(decoded.Elem().Interface())
	if err != nil {
		return fmt.Errorf("re-encoding %v: %w", rt, err)
	}
	if !bytes.Equal(again, stored) {
		return fmt.Errorf("%s decoded into %v and encoded again differs (a field's encoding changed, or it is "+
			"no longer encoded):\ngolden:     %s\nre-encoded: %s", file, rt, stored, again)
	}
	if current, _ := compact(want); !bytes.Equal(current, stored) {
		return fmt.Errorf("%v no longer encodes as %s (a field was added, renamed, removed or moved):\n"+
			"golden: %s\nnow:    %s", rt, file, stored, current)
	}
	return nil
}

func encodeFilled(rt reflect.Type) ([]byte, error) {
	filled, err := Fill(rt)
	if err != nil {
		return nil, fmt.Errorf("filling %v: %w", rt, err)
	}
	b, err := json.MarshalIndent(filled.Interface(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding a filled %v: %w", rt, err)
	}
	return b, nil
}

func compact(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	err := json.Compact(&buf, b)
	return buf.Bytes(), err
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	baseTime          = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
)

// Fill returns a value of rt with every exported, encoded field set to a
// non-zero value derived from the field's JSON path: slices and maps get
// one element, pointers a value. A recursive type is filled one level deep.
func Fill(rt reflect.Type) (reflect.Value, error) {
	v := reflect.New(rt).Elem()
	err := fill(v, "", map[reflect.Type]bool{})
	return v, err
}

func fill(v reflect.Value, path string, onStack map[reflect.Type]bool) error {
	t := v.Type()
	if t == timeType {
		h := hash(path)
		v.Set(reflect.ValueOf(baseTime.Add(time.Duration(h%86400)*time.Second + time.Duration(h%1000+1)*time.Millisecond)))
		return nil
	}
	if t == rawMessageType {
		v.SetBytes(fmt.Appendf(nil, "%q", path))
		return nil
	}
	if customEncoding(t) && isScalar(t.Kind()) {
		return fillCustom(v, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		if onStack[t] {
			return nil
		}
		onStack[t] = true
		defer delete(onStack, t)
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !(f.Anonymous && f.Type.Kind() == reflect.Struct) {
				continue
			}
			name, skip := jsonName(f)
			if skip {
				continue
			}
			sub := path // encoding/json flattens an untagged embedded struct
			if !f.Anonymous || name != "" || indirect(f.Type).Kind() != reflect.Struct {
				if name == "" {
					name = f.Name
				}
				sub = join(path, name)
			}
			if err := fill(v.Field(i), sub, onStack); err != nil {
				return err
			}
		}
	case reflect.Pointer:
		if onStack[t.Elem()] {
			return nil
		}
		p := reflect.New(t.Elem())
		if err := fill(p.Elem(), path, onStack); err != nil {
			return err
		}
		v.Set(p)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !customEncoding(t.Elem()) {
			v.SetBytes([]byte(path))
			return nil
		}
		s := reflect.MakeSlice(t, 1, 1)
		if err := fill(s.Index(0), path+"[0]", onStack); err != nil {
			return err
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			if err := fill(v.Index(i), fmt.Sprintf("%s[%d]", path, i), onStack); err != nil {
				return err
			}
		}
	case reflect.Map:
		m := reflect.MakeMapWithSize(t, 1)
		k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
		if err := fill(k, path+"{key}", onStack); err != nil {
			return err
		}
		if err := fill(e, path+"{value}", onStack); err != nil {
			return err
		}
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString(path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(hash(path)%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(hash(path)%100 + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(hash(path)%100) + 0.5)
	default:
		return fmt.Errorf("%s: cannot fill a %v (kind %v); stored events need concrete types", path, t, t.Kind())
	}
	return nil
}

// fillCustom fills a scalar with its own JSON or text encoding (a duration
// written as "90s", an int-or-percent) with the first candidate that
// survives an encode/decode round trip, realistic ones first, so that a
// type that validates when it decodes accepts its golden value.
func fillCustom(v reflect.Value, path string) error {
	h := hash(path)
	var candidates []any
	switch v.Kind() {
	case reflect.String:
		candidates = []any{fmt.Sprintf("%d%%", h%100+1), path}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		candidates = []any{int64(h%3600+1) * int64(time.Second), int64(h%100 + 1)}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		candidates = []any{uint64(h%100 + 1)}
	case reflect.Float32, reflect.Float64:
		candidates = []any{float64(h%100) + 0.5}
	case reflect.Bool:
		candidates = []any{true}
	}
	for _, c := range candidates {
		x := reflect.New(v.Type()).Elem()
		x.Set(reflect.ValueOf(c).Convert(v.Type()))
		if roundTrips(x) {
			v.Set(x)
			return nil
		}
	}
	return fmt.Errorf("%s: no value of %v survives encoding and decoding", path, v.Type())
}

func roundTrips(x reflect.Value) bool {
	b, err := json.Marshal(x.Interface())
	if err != nil {
		return false
	}
	y := reflect.New(x.Type())
	if err := json.Unmarshal(b, y.Interface()); err != nil {
		return false
	}
	c, err := json.Marshal(y.Elem().Interface())
	return err == nil && bytes.Equal(b, c) && !y.Elem().IsZero()
}

func customEncoding(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonMarshalerType) || p.Implements(jsonMarshalerType) ||
		t.Implements(textMarshalerType) || p.Implements(textMarshalerType)
}

func isScalar(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// jsonName is the field's name in its JSON tag ("" if the tag names none)
// and whether encoding/json skips the field.
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", true
	}
	name, _, _ := strings.Cut(tag, ",")
	return name, false
}

func indirect(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
