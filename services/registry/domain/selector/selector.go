// Package selector parses Kubernetes label selectors
// ("env=prod,rack in (a,b),!gpu,tier!=db") with the canonical parser from
// k8s.io/apimachinery, so that anvil selects machines exactly the way
// kubectl selects nodes.
package selector

import (
	"strings"
	"unicode/utf8"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// MaxLen bounds a selector's length: selectors arrive in URLs and
// commands, and the parser's work grows with them.
const MaxLen = 4096

// Selector matches label sets. The zero value matches everything.
type Selector struct {
	sel labels.Selector
}

// Parse parses expr; an empty expr matches everything. Errors are field
// errors on "selector" carrying the parser's reason.
func Parse(expr string) (Selector, error) {
	if len(expr) > MaxLen {
		return Selector{}, errs.Invalid("selector", "must be at most %d bytes, got %d", MaxLen, len(expr))
	}
	// Kubernetes' lexer ends the input at a NUL: "\x00=x" would parse as
	// the empty selector, which selects everything.
	if i := strings.IndexFunc(expr, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }); i >= 0 {
		return Selector{}, errs.Invalid("selector", "must not contain control characters or invalid UTF-8 (at byte %d)", i)
	}
	if strings.TrimSpace(expr) == "" {
		return Selector{}, nil
	}
	sel, err := labels.Parse(expr)
	if err != nil {
		return Selector{}, errs.Invalid("selector", "%s", err.Error())
	}
	return Selector{sel: sel}, nil
}

// Matches reports whether a machine with these labels is selected.
func (s Selector) Matches(set map[string]string) bool {
	if s.sel == nil {
		return true
	}
	return s.sel.Matches(labels.Set(set))
}

// Empty reports whether s selects everything.
func (s Selector) Empty() bool { return s.sel == nil || s.sel.Empty() }

// String is the canonical form (requirements sorted by key), so equal
// selectors print the same.
func (s Selector) String() string {
	if s.sel == nil {
		return ""
	}
	return s.sel.String()
}

// Pin says that label Key must have one of Values for a selector to match.
type Pin struct {
	Key    string
	Values []string // sorted
}

// Pins lists the requirements that pin a label to a set of values
// (=, == and in). Indexes use them to narrow a search.
func (s Selector) Pins() []Pin {
	if s.sel == nil {
		return nil
	}
	reqs, _ := s.sel.Requirements()
	var out []Pin
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			out = append(out, Pin{Key: r.Key(), Values: r.Values().List()})
		}
	}
	return out
}

// RequiredValue returns the value label key must have for s to match, when
// s pins it with = or == (or "in" with one value). Indexes use it to narrow
// a search.
func (s Selector) RequiredValue(key string) (string, bool) {
	if s.sel == nil {
		return "", false
	}
	return s.sel.RequiresExactMatch(key)
}
