package enrollment

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2030, 3, 1, 9, 0, 0, 0, time.UTC)

func TestAdmit(t *testing.T) {
	rate := Limits{Rate: 0.5, Burst: 2} // one registration every 2s, 2 at once
	tests := []struct {
		name   string
		usage  Usage
		limits Limits
		at     time.Time
		// want: the usage after, or the refusal
		want      Usage
		capped    bool
		retryWait time.Duration
	}{
		{"no limits", Usage{Registered: 7}, Limits{}, t0, Usage{Registered: 8}, false, 0},
		{"under the cap", Usage{Registered: 2}, Limits{MaxMachines: 3}, t0, Usage{Registered: 3}, false, 0},
		{"at the cap", Usage{Registered: 3}, Limits{MaxMachines: 3}, t0, Usage{}, true, 0},
		{"over the cap (lowered since)", Usage{Registered: 5}, Limits{MaxMachines: 3}, t0, Usage{}, true, 0},
		{"a new token's bucket is full", Usage{}, rate, t0, Usage{Registered: 1, Tokens: 1, At: t0}, false, 0},
		{"the last token", Usage{Registered: 1, Tokens: 1, At: t0}, rate, t0, Usage{Registered: 2, Tokens: 0, At: t0}, false, 0},
		{"an empty bucket", Usage{Registered: 2, Tokens: 0, At: t0}, rate, t0, Usage{}, false, 2 * time.Second},
		{"half refilled", Usage{Registered: 2, Tokens: 0, At: t0}, rate, t0.Add(time.Second), Usage{}, false, time.Second},
		{"refilled", Usage{Registered: 2, Tokens: 0, At: t0}, rate, t0.Add(2 * time.Second), Usage{Registered: 3, Tokens: 0, At: t0.Add(2 * time.Second)}, false, 0},
		{"refills up to the burst only", Usage{Registered: 2, Tokens: 0, At: t0}, rate, t0.Add(time.Hour), Usage{Registered: 3, Tokens: 1, At: t0.Add(time.Hour)}, false, 0},
		{"a clock that went back refills nothing", Usage{Registered: 2, Tokens: 0.5, At: t0}, rate, t0.Add(-time.Minute), Usage{}, false, time.Second},
		{"the cap wins over the rate", Usage{Registered: 3, Tokens: 0, At: t0}, Limits{MaxMachines: 3, Rate: 1, Burst: 1}, t0, Usage{}, true, 0},
		{"a slow rate asks for a long wait", Usage{Registered: 1, Tokens: 0, At: t0}, Limits{Rate: 1.0 / 60, Burst: 1}, t0, Usage{}, false, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.usage.Admit(tc.limits, tc.at)
			var capped *CapReached
			var limited *RateLimited
			switch {
			case tc.capped:
				if !errors.As(err, &capped) || capped.Max != tc.limits.MaxMachines || capped.Registered != tc.usage.Registered {
					t.Fatalf("want the cap refusal, got %v", err)
				}
			case tc.retryWait > 0:
				if !errors.As(err, &limited) || limited.RetryAfter != tc.retryWait {
					t.Fatalf("want a rate refusal asking to wait %s, got %v", tc.retryWait, err)
				}
			default:
				if err != nil || got != tc.want {
					t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
				}
			}
			if err != nil && got != tc.usage {
				t.Fatalf("a refusal changed the usage: %+v", got)
			}
		})
	}
}

func TestReleaseGivesBackTheAdmission(t *testing.T) {
	l := Limits{MaxMachines: 1, Rate: 1, Burst: 1}
	u, err := Usage{}.Admit(l, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Admit(l, t0); err == nil {
		t.Fatal("a second registration past a cap of 1 was admitted")
	}
	u = u.Release(l, t0)
	if u.Registered != 0 || u.Tokens != 1 {
		t.Fatalf("after a release: %+v", u)
	}
	if _, err := u.Admit(l, t0); err != nil {
		t.Fatalf("the released place is free again: %v", err)
	}
	if (Usage{}).Release(l, t0).Registered != 0 {
		t.Fatal("a release never goes below zero")
	}
	if (Usage{Registered: 1}).Count().Registered != 2 {
		t.Fatal("Count counts")
	}
}

func TestRefusalsReadWell(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&CapReached{Registered: 40, Max: 40}, "it has registered 40 machines and its max_machines is 40"},
		{&RateLimited{Rate: 2, Burst: 100, RetryAfter: time.Second}, "it registers at most 2 machines per second (100 at once), and its limit is used up; retry in 1s"},
		{&RateLimited{Rate: 0.5, Burst: 1, RetryAfter: 2 * time.Second}, "it registers at most 0.5 machines per second (1 at once), and its limit is used up; retry in 2s"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
