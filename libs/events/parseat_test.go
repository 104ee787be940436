package events

import (
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

func TestParseAt(t *testing.T) {
	ts := time.Date(2025, 6, 2, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want Position
		bad  bool
	}{
		{"1234", AtSeq(1234), false},
		{"2025-06-02T09:00:00Z", AtTime(ts), false},
		{"0", Position{}, true},
		{"-3", Position{}, true},
		{"yesterday", Position{}, true},
		{"", Position{}, true},
	} {
		got, err := ParseAt(c.in)
		if c.bad {
			if !errs.Is(err, errs.KindValidation) {
				t.Errorf("ParseAt(%q): err %v, want a validation error", c.in, err)
			}
			continue
		}
		if err != nil || got.Seq != c.want.Seq || !got.Time.Equal(c.want.Time) {
			t.Errorf("ParseAt(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}
