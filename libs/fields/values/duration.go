package values

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("90s",
// "15m0s"); empty reads as 0.
type Duration time.Duration

func (d Duration) String() string               { return time.Duration(d).String() }
func (d Duration) Std() time.Duration           { return time.Duration(d) }
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = 0
		return nil
	}
	x, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"90s\" or \"15m\"", b)
	}
	*d = Duration(x)
	return nil
}
