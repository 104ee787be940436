package golden

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type settings struct {
	Limit  percent `json:"limit,omitempty"`
	Pause  seconds `json:"pause,omitempty"`
	Window *[]string
}

type percent string

func (p percent) MarshalJSON() ([]byte, error) { return json.Marshal(string(p)) }
func (p *percent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil || !strings.HasSuffix(s, "%") {
		return &json.UnsupportedValueError{Str: s} // validates, as a real int-or-percent might
	}
	*p = percent(s)
	return nil
}

type seconds time.Duration

func (d seconds) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }
func (d *seconds) UnmarshalText(b []byte) error {
	x, err := time.ParseDuration(string(b))
	*d = seconds(x)
	return err
}

type digest [4]byte

func (h digest) MarshalText() ([]byte, error) {
	return []byte{'0' + h[0]%10, '0' + h[1]%10, '0' + h[2]%10, '0' + h[3]%10}, nil
}
func (h *digest) UnmarshalText(b []byte) error {
	for i := range h {
		h[i] = b[i] - '0'
	}
	return nil
}

type started struct {
	ID       string            `json:"id"`
	Count    int               `json:"count,omitempty"`
	Ratio    float64           `json:"ratio"`
	On       bool              `json:"on,omitempty"`
	At       time.Time         `json:"at"`
	Labels   map[string]uint16 `json:"labels,omitempty"`
	Raw      json.RawMessage   `json:"raw"`
	Hash     digest            `json:"hash"`
	Skipped  string            `json:"-"`
	internal string
	settings
	Next *started `json:"next,omitempty"`
}

// The same JSON from differently named Go types: what moving a type
// between packages looks like.
type startedMoved struct {
	Ident    string            `json:"id"`
	N        int               `json:"count,omitempty"`
	Ratio    float64           `json:"ratio"`
	On       bool              `json:"on,omitempty"`
	At       time.Time         `json:"at"`
	Labels   map[string]uint16 `json:"labels,omitempty"`
	Raw      json.RawMessage   `json:"raw"`
	Hash     digest            `json:"hash"`
	Strategy                   // another name for settings
	Next     *startedMoved     `json:"next,omitempty"`
}

type Strategy settings

type startedFieldAdded struct {
	started
	Extra string `json:"extra,omitempty"`
}

type startedFieldRenamed struct {
	ID     string            `json:"uid"`
	Count  int               `json:"count,omitempty"`
	Ratio  float64           `json:"ratio"`
	On     bool              `json:"on,omitempty"`
	At     time.Time         `json:"at"`
	Labels map[string]uint16 `json:"labels,omitempty"`
	Raw    json.RawMessage   `json:"raw"`
	Hash   digest            `json:"hash"`
	settings
	Next *startedFieldRenamed `json:"next,omitempty"`
}

type startedFieldRemoved struct {
	ID     string            `json:"id"`
	Ratio  float64           `json:"ratio"`
	On     bool              `json:"on,omitempty"`
	At     time.Time         `json:"at"`
	Labels map[string]uint16 `json:"labels,omitempty"`
	Raw    json.RawMessage   `json:"raw"`
	Hash   digest            `json:"hash"`
	settings
	Next *startedFieldRemoved `json:"next,omitempty"`
}

type startedFieldRetyped struct {
	ID     string            `json:"id"`
	Count  string            `json:"count,omitempty"`
	Ratio  float64           `json:"ratio"`
	On     bool              `json:"on,omitempty"`
	At     time.Time         `json:"at"`
	Labels map[string]uint16 `json:"labels,omitempty"`
	Raw    json.RawMessage   `json:"raw"`
	Hash   digest            `json:"hash"`
	settings
	Next *startedFieldRetyped `json:"next,omitempty"`
}

func (started) EventType() string { return "test.started" }

func TestCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "test.started.json")
	if err := Write(file, reflect.TypeFor[started]()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ  reflect.Type
		fail string // "" passes
	}{
		{reflect.TypeFor[started](), ""},
		{reflect.TypeFor[startedMoved](), ""},
		{reflect.TypeFor[startedFieldAdded](), "no longer encodes"},
		{reflect.TypeFor[startedFieldRenamed](), `unknown field "id"`},
		{reflect.TypeFor[startedFieldRemoved](), `unknown field "count"`},
		{reflect.TypeFor[startedFieldRetyped](), "does not decode"},
	} {
		err := Check(file, c.typ)
		switch {
		case c.fail == "" && err != nil:
			t.Errorf("%v: %v", c.typ, err)
		case c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)):
			t.Errorf("%v: %v, want an error saying %q", c.typ, err, c.fail)
		}
	}
}

func TestFillSetsEveryEncodedField(t *testing.T) {
	v, err := Fill(reflect.TypeFor[started]())
	if err != nil {
		t.Fatal(err)
	}
	s := v.Interface().(started)
	if s.Skipped != "" || s.internal != "" {
		t.Errorf("filled fields encoding/json skips: %+v", s)
	}
	if s.Next != nil {
		t.Errorf("filled a recursive type more than one level deep")
	}
	if !strings.HasSuffix(string(s.Limit), "%") {
		t.Errorf("a validating custom type got %q", s.Limit)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"id", "count", "ratio", "on", "at", "labels", "raw", "hash", "limit", "pause", "Window"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("%q not set in %s", name, b)
		}
	}
	if again, _ := Fill(reflect.TypeFor[started]()); !reflect.DeepEqual(again.Interface(), s) {
		t.Errorf("Fill is not deterministic")
	}
}

func TestOrphans(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"test.started", "test.gone"} {
		if err := Write(filepath.Join(dir, name+".json"), reflect.TypeFor[started]()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := orphans(dir, map[string]reflect.Type{"test.started": reflect.TypeFor[started]()})
	if err != nil || len(got) != 1 || filepath.Base(got[0]) != "test.gone.json" {
		t.Fatalf("orphans: %v %v, want test.gone.json", got, err)
	}
}

func TestEvents(t *testing.T) {
	dir := t.TempDir()
	Events(t, dir, []any{started{}}, true)
	Events(t, dir, []any{started{}}, false)
}
