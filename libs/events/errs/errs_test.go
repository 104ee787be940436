package errs

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

func TestRateLimited(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		want  int
	}{{0, 1}, {300 * time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {16*time.Minute + 40*time.Second, 1000}} {
		e := RateLimited(tc.after, "slow down")
		if e.RetryAfter != tc.want || HTTPStatus(e.Kind) != http.StatusTooManyRequests {
			t.Errorf("RateLimited(%s): retry after %d, status %d; want %d, 429", tc.after, e.RetryAfter, HTTPStatus(e.Kind), tc.want)
		}
	}
	// The delay crosses service boundaries with the error.
	b, _ := json.Marshal(RateLimited(3*time.Second, "slow down"))
	var back Error
	if err := json.Unmarshal(b, &back); err != nil || back.Kind != KindRateLimited || back.RetryAfter != 3 {
		t.Fatalf("round trip of %s: %+v %v", b, back, err)
	}
}
