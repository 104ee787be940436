package selector

import (
	"reflect"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

func TestParseAndMatch(t *testing.T) {
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	cases := []struct {
		expr string
		in   map[string]string
		want bool
	}{
		{"", m("a", "b"), true},
		{"   ", nil, true},
		{"env=", m("env", ""), true}, // an empty value is a value, as in kubectl
		{"env=prod", m("env", "prod"), true},
		{"env==prod", m("env", "prod"), true},
		{"env=prod", m("env", "dev"), false},
		{"env!=prod", m(), true},
		{"rack in (a,b)", m("rack", "b"), true},
		{"rack in (a,b)", m("rack", "c"), false},
		{"rack notin (a,b)", m("rack", "c"), true},
		{"!gpu", m("gpu", "true"), false},
		{"!gpu", m(), true},
		{"gpu", m("gpu", ""), true},
		{"env=prod,rack in (a,b),!gpu,tier!=db", m("env", "prod", "rack", "a", "tier", "web"), true},
		{"env=prod,rack in (a,b),!gpu,tier!=db", m("env", "prod", "rack", "a", "tier", "db"), false},
		{"example.com/zone=eu-1", m("example.com/zone", "eu-1"), true},
		{"cpus>8", m("cpus", "16"), true},
		{"cpus<8", m("cpus", "16"), false},
	}
	for _, c := range cases {
		s, err := Parse(c.expr)
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		if got := s.Matches(c.in); got != c.want {
			t.Errorf("%q on %v: got %v, want %v", c.expr, c.in, got, c.want)
		}
	}
	var zero Selector
	if !zero.Matches(nil) || !zero.Empty() || zero.String() != "" {
		t.Fatal("zero selector matches everything")
	}
}

func TestParseErrors(t *testing.T) {
	for _, expr := range []string{
		"=prod", "rack in (", "a b", "env=prod,", "!", "x=y=z",
		"-bad=1", "key=" + strings.Repeat("v", 64), "a/b/c=1", "cpus>x", strings.Repeat("a", MaxLen+1),
	} {
		_, err := Parse(expr)
		e := errs.As(err)
		if e == nil || e.Kind != errs.KindValidation || len(e.Fields) != 1 || e.Fields[0].Field != "selector" || e.Fields[0].Reason == "" {
			t.Errorf("%q: want a field error on selector, got %v", expr, err)
		}
	}
}

func TestCanonicalStringAndRequiredValue(t *testing.T) {
	a, _ := Parse("tier!=db, env = prod")
	b, _ := Parse("env=prod,tier!=db")
	if a.String() != b.String() {
		t.Fatalf("%q != %q", a.String(), b.String())
	}
	if v, ok := a.RequiredValue("env"); !ok || v != "prod" {
		t.Fatalf("required env: %q %v", v, ok)
	}
	if _, ok := a.RequiredValue("tier"); ok {
		t.Fatal("tier is not pinned")
	}
	c, _ := Parse("rack in (b,a),env==prod,!gpu,tier notin (x),zone")
	want := []Pin{{Key: "env", Values: []string{"prod"}}, {Key: "rack", Values: []string{"a", "b"}}}
	if got := c.Pins(); !reflect.DeepEqual(got, want) {
		t.Fatalf("pins %v, want %v", got, want)
	}
	if (Selector{}).Pins() != nil {
		t.Fatal("the empty selector pins nothing")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "env=prod,rack in (a,b),!gpu,tier!=db", "a in (", "x==y", "k notin (a,,b)", "a>1", "a/b=c", "((", "!!a", "a=b,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr)
		if err != nil {
			if errs.KindOf(err) != errs.KindValidation {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		_ = s.Matches(map[string]string{"env": "prod", "a": "1"})
		// The canonical form must parse to itself.
		again, err := Parse(s.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", s.String(), expr, err)
		}
		if again.String() != s.String() {
			t.Fatalf("canonical form is not stable: %q -> %q", s.String(), again.String())
		}
	})
}

func TestControlCharactersAreRefused(t *testing.T) {
	for _, expr := range []string{"\x00=x", "rack=r1\x00", "rack\n=r1", "rack=\x1b[31m", "rack=\xff"} {
		if _, err := Parse(expr); !errs.Is(err, errs.KindValidation) {
			t.Errorf("%q must be refused (a NUL once made a selector that matched everything), got %v", expr, err)
		}
	}
}
