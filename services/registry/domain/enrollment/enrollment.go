// Package enrollment bounds what one enrollment token may register: at
// most MaxMachines machines in all (the token's max_machines), and new
// registrations at a rate (a token bucket). Boots of machines that are
// already registered are never limited: only registrations are.
package enrollment

import (
	"fmt"
	"math"
	"time"
)

// Limits are one enrollment token's bounds.
type Limits struct {
	// MaxMachines is how many machines the token may register in all
	// (0: no cap).
	MaxMachines int
	// Rate is how many registrations per second the token's bucket refills
	// (<= 0: no rate limit), and Burst how many it holds (at least 1).
	Rate  float64
	Burst int
}

// Usage is what the registry keeps about one enrollment token: how many
// machines it registered, and its bucket.
type Usage struct {
	Registered int `json:"registered"`
	// Tokens is what the bucket held at At; a zero At is a full bucket.
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at,omitzero"`
}

// CapReached refuses a registration past the token's max_machines.
type CapReached struct{ Registered, Max int }

func (e *CapReached) Error() string {
	return fmt.Sprintf("it has registered %d machines and its max_machines is %d", e.Registered, e.Max)
}

// RateLimited refuses a registration while the token's bucket is empty.
type RateLimited struct {
	Rate       float64
	Burst      int
	RetryAfter time.Duration // whole seconds, at least one
}

func (e *RateLimited) Error() string {
	return fmt.Sprintf("it registers at most %s machines per second (%d at once), and its limit is used up; retry in %s",
		formatRate(e.Rate), e.Burst, e.RetryAfter)
}

func formatRate(r float64) string {
	if r == math.Trunc(r) {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%g", r)
}

func (l Limits) burst() float64 { return float64(max(l.Burst, 1)) }

// refill is the bucket at now: it refills at Rate, up to Burst. A clock
// that went back (another replica's) refills nothing.
func (u Usage) refill(l Limits, now time.Time) float64 {
	if l.Rate <= 0 {
		return u.Tokens
	}
	if u.At.IsZero() {
		return l.burst()
	}
	elapsed := max(now.Sub(u.At).Seconds(), 0)
	return math.Min(l.burst(), u.Tokens+elapsed*l.Rate)
}

// Admit decides one new registration at now: the usage after it, or a
// *CapReached (which wins: waiting does not help) or a *RateLimited
// refusal.
func (u Usage) Admit(l Limits, now time.Time) (Usage, error) {
	if l.MaxMachines > 0 && u.Registered >= l.MaxMachines {
		return u, &CapReached{Registered: u.Registered, Max: l.MaxMachines}
	}
	if l.Rate <= 0 {
		u.Registered++
		return u, nil
	}
	tokens := u.refill(l, now)
	if tokens < 1 {
		wait := time.Duration(math.Ceil((1-tokens)/l.Rate)) * time.Second
		return u, &RateLimited{Rate: l.Rate, Burst: max(l.Burst, 1), RetryAfter: max(wait, time.Second)}
	}
	return Usage{Registered: u.Registered + 1, Tokens: tokens - 1, At: now.UTC()}, nil
}

// Release gives back an admission whose registration did not happen (the
// machine was registered meanwhile, or the registration failed).
func (u Usage) Release(l Limits, now time.Time) Usage {
	u.Registered = max(u.Registered-1, 0)
	if l.Rate > 0 {
		u.Tokens, u.At = math.Min(l.burst(), u.refill(l, now)+1), now.UTC()
	}
	return u
}

// Count records a registration that happened without an admission (a
// machine the registry believed registered was deleted meanwhile): it
// counts, whatever the limits.
func (u Usage) Count() Usage {
	u.Registered++
	return u
}
