package values

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// IntOrPercent is a count ("3") or a percentage of a whole ("25%"). In
// JSON a count is a number and a percentage a string, as Kubernetes
// writes maxUnavailable; either form reads.
type IntOrPercent string

func (v IntOrPercent) parse() (n int, percent bool, err error) {
	s := string(v)
	percent = strings.HasSuffix(s, "%")
	num := strings.TrimSuffix(s, "%")
	if num == "" || len(num) > 9 || strings.TrimLeft(num, "0123456789") != "" {
		return 0, false, fmt.Errorf("must be an integer >= 0 or a percentage 0%%-100%% such as \"25%%\", got %q", s)
	}
	n, _ = strconv.Atoi(num)
	if percent && n > 100 {
		return 0, false, fmt.Errorf("percentage must be between 0%% and 100%%, got %q", s)
	}
	return n, percent, nil
}

// Check says why v is neither a count nor a percentage between 0% and
// 100%; nil if it is one.
func (v IntOrPercent) Check() error {
	_, _, err := v.parse()
	return err
}

// Resolve turns the value into a number of machines for a pool of size
// total. Percentages round down, and the result is at least 1 (bare metal
// cannot surge, so 0 would stall every rollout) and at most total. A
// value that is neither counts as 1.
func (v IntOrPercent) Resolve(total int) int {
	if total <= 0 {
		return 0
	}
	n, percent, err := v.parse()
	if err != nil {
		n, percent = 1, false
	}
	if percent {
		n = n * total / 100
	}
	return max(1, min(n, total))
}

func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	if n, percent, err := v.parse(); err == nil && !percent {
		return []byte(strconv.Itoa(n)), nil
	}
	return json.Marshal(string(v))
}

// UnmarshalJSON reads a number or a string; anything else is a
// *json.UnmarshalTypeError, which encoding/json completes with the
// field's name.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	s, err := DecodeIntOrPercent(b, reflect.TypeFor[IntOrPercent]())
	if err == nil && s != nil {
		*v = IntOrPercent(*s)
	}
	return err
}

// DecodeIntOrPercent reads an int-or-percent's JSON, a number or a string,
// as its text (nil for null). Anything else is a *json.UnmarshalTypeError
// naming t, which encoding/json completes with the field's name; every
// int-or-percent type decodes through it.
func DecodeIntOrPercent(b []byte, t reflect.Type) (*string, error) {
	if string(b) == "null" {
		return nil, nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		s := n.String()
		return &s, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		return &s, nil
	}
	kind := "value"
	if len(b) > 0 {
		switch b[0] {
		case '{':
			kind = "object"
		case '[':
			kind = "array"
		case 't', 'f':
			kind = "bool"
		}
	}
	return nil, &json.UnmarshalTypeError{Value: kind, Type: t}
}
