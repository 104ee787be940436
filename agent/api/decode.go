package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength bounds instruction ids and revisions: they end up in URLs, logs
// and the dedup memory, so an unbounded value from a confused server would hurt.
const MaxIDLength = 256

// InvalidInstruction is an element of an instructions response that the agent
// cannot carry out. ID is empty when the element had no usable id, in which
// case it cannot be acknowledged at all.
type InvalidInstruction struct {
	ID     string
	Reason string
}

// ErrMalformed wraps every error of DecodeInstructions about the response as a whole.
var ErrMalformed = errors.New("malformed instructions response")

// DecodeInstructions parses the body of a 200 answer to the instructions
// long-poll. Elements are decoded one by one so that one bad element does not
// hide the good ones, and a bad element with a readable id can still be acked
// "failed". Unknown fields are ignored for forward compatibility.
func DecodeInstructions(body []byte) ([]Instruction, []InvalidInstruction, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if top == nil {
		return nil, nil, fmt.Errorf("%w: body is null", ErrMalformed)
	}
	list, ok := top["instructions"]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no \"instructions\" field", ErrMalformed)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		return nil, nil, fmt.Errorf("%w: \"instructions\" is not an array", ErrMalformed)
	}

	var valid []Instruction
	var invalid []InvalidInstruction
	for i, item := range items {
		in, bad := decodeInstruction(item)
		if bad != nil {
			if bad.ID == "" {
				bad.Reason = fmt.Sprintf("instruction %d: %s", i, bad.Reason)
			}
			invalid = append(invalid, *bad)
			continue
		}
		valid = append(valid, in)
	}
	return valid, invalid, nil
}

func decodeInstruction(item json.RawMessage) (Instruction, *InvalidInstruction) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(item, &fields); err != nil || fields == nil {
		return Instruction{}, &InvalidInstruction{Reason: "not a JSON object"}
	}

	id, present, err := stringField(fields, "id")
	switch {
	case err != nil:
		return Instruction{}, &InvalidInstruction{Reason: err.Error()}
	case !present || id == "":
		return Instruction{}, &InvalidInstruction{Reason: "missing id"}
	case !printable(id, MaxIDLength):
		return Instruction{}, &InvalidInstruction{Reason: fmt.Sprintf("id is longer than %d bytes or not printable UTF-8", MaxIDLength)}
	}
	fail := func(format string, args ...any) (Instruction, *InvalidInstruction) {
		return Instruction{}, &InvalidInstruction{ID: id, Reason: fmt.Sprintf(format, args...)}
	}

	kind, _, err := stringField(fields, "kind")
	if err != nil {
		return fail("%v", err)
	}
	switch Kind(kind) {
	case KindReboot, KindReapply:
	case "":
		return fail("missing kind")
	default:
		return fail("unknown instruction kind %q", truncate(kind, 64))
	}

	rev, _, err := stringField(fields, "revision")
	if err != nil {
		return fail("%v", err)
	}
	if rev == "" {
		return fail("missing revision")
	}
	if !printable(rev, MaxIDLength) {
		return fail("revision is longer than %d bytes or not printable UTF-8", MaxIDLength)
	}

	var issued time.Time
	if s, present, err := stringField(fields, "issued_at"); err != nil {
		return fail("%v", err)
	} else if present && s != "" {
		// RFC3339 parsing also accepts fractional seconds.
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return fail("issued_at %q is not RFC 3339", truncate(s, 64))
		}
		issued = t
	}

	return Instruction{ID: id, Kind: Kind(kind), Revision: rev, IssuedAt: issued}, nil
}

// stringField reads an optional string field; JSON null counts as absent.
func stringField(fields map[string]json.RawMessage, name string) (string, bool, error) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, fmt.Errorf("field %q is not a string", name)
	}
	return s, true, nil
}

func printable(s string, max int) bool {
	if len(s) > max || !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Back off to a rune boundary so %q does not print half a character.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// DecodeProblem parses an RFC 9457 problem document. It returns nil for
// anything that is not one, so callers can fall back to the status line.
func DecodeProblem(body []byte) *Problem {
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil {
		return nil
	}
	if p.Type == "" && p.Title == "" && p.Detail == "" && p.Status == 0 && len(p.Errors) == 0 {
		return nil
	}
	return &p
}

// String renders a problem for a log line: title, detail and field errors.
func (p *Problem) String() string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(p.Title)
	if p.Detail != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(p.Detail)
	}
	for _, e := range p.Errors {
		fmt.Fprintf(&b, "; %s: %s", e.Field, e.Reason)
	}
	return b.String()
}
