package command

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// checkStrict walks data, which must be one well-formed JSON value, along
// the Go type t that it is about to be decoded into, and refuses what
// encoding/json would quietly accept:
//   - a key given twice in one object (encoding/json keeps the last);
//   - a key that names a field only when case is ignored ("Display_Name"
//     for "display_name": encoding/json folds case);
//   - a value that a field's own UnmarshalJSON or UnmarshalText refuses
//     (a time that is not RFC 3339, say), named by its field rather than as
//     "body", which is all encoding/json can say.
//
// Paths are dotted as encoding/json names them ("spec.kubernetes.minor",
// "labels.rack", "items.2.name").
func checkStrict(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := strictWalker{dec: dec}
	return w.value(t, "")
}

type strictWalker struct {
	dec *json.Decoder
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	rawMessage      = reflect.TypeFor[json.RawMessage]()
	timeType        = reflect.TypeFor[time.Time]()
)

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func field(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// value checks the next JSON value against t (nil: anything).
func (w *strictWalker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t != rawMessage && (reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		// A type that decodes itself: try it here, so that its complaint
		// names the field.
		var raw json.RawMessage
		if err := w.dec.Decode(&raw); err != nil {
			return err
		}
		if string(raw) == "null" {
			return nil
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return nil // reported with its field by the decoder itself
			}
			if t == timeType {
				return errs.Invalid(field(path), "must be an RFC 3339 time such as \"2030-01-02T15:04:05Z\", got %s", clip(raw))
			}
			return errs.Invalid(field(path), "%v", err)
		}
		return nil
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return w.object(t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(elem, join(path, fmt.Sprint(i))); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ]
		return err
	}
	return nil // a scalar: its type is the decoder's to check
}

// object checks the members of an object whose '{' was read.
func (w *strictWalker) object(t reflect.Type, path string) error {
	var fields map[string]fieldInfo
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]string{} // folded key → key as written
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		folded := key
		if fields != nil {
			// Field names match without case in encoding/json; map keys
			// (labels, say) are data and may differ only in case.
			folded = strings.ToLower(key)
		}
		if prev, dup := seen[folded]; dup {
			if prev == key {
				return errs.Invalid(join(path, key), "is given twice; give each field once")
			}
			return errs.Invalid(join(path, key), "is given twice (also as %q); keys are case-sensitive, give each field once", prev)
		}
		seen[folded] = key
		next := elem
		if fields != nil {
			f, ok := fields[key]
			if !ok {
				f, ok = fields[folded]
			}
			if ok && f.name != key {
				return errs.Invalid(join(path, key), "is not a known field; did you mean %q? (keys are case-sensitive)", f.name)
			}
			// An unknown key is the decoder's to refuse, with its name.
			next = f.typ
		}
		if err := w.value(next, join(path, key)); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // }
	return err
}

type fieldInfo struct {
	name string
	typ  reflect.Type
}

var fieldCache sync.Map // reflect.Type → map[string]fieldInfo

// fieldsOf lists a struct's JSON field names as encoding/json sees them,
// embedded structs flattened, each name also under its lowercase form.
func fieldsOf(t reflect.Type) map[string]fieldInfo {
	if v, ok := fieldCache.Load(t); ok {
		return v.(map[string]fieldInfo)
	}
	out := map[string]fieldInfo{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous && name == "" {
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if _, taken := out[name]; !taken {
				out[name] = fieldInfo{name: name, typ: sf.Type}
			}
			if low := strings.ToLower(name); low != name {
				if _, taken := out[low]; !taken {
					out[low] = fieldInfo{name: name, typ: sf.Type}
				}
			}
		}
	}
	walk(t)
	fieldCache.Store(t, out)
	return out
}

func clip(raw []byte) string {
	const max = 64
	if len(raw) > max {
		return string(raw[:max]) + "…"
	}
	return string(raw)
}
