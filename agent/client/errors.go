package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

// Error is a failed call: either a transport error (StatusCode 0, Err set) or
// an unexpected HTTP status with the server's problem document, if any.
type Error struct {
	Op         string // heartbeat, report, instructions, ack
	StatusCode int
	Problem    *api.Problem
	// RetryAfter is the server's Retry-After on 429/503; 0 when absent.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	switch {
	case e.StatusCode == 0:
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	case e.Problem != nil:
		return fmt.Sprintf("%s: %d %s: %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode), e.Problem)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	default:
		return fmt.Sprintf("%s: %d %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode))
	}
}

func (e *Error) Unwrap() error { return e.Err }

// StatusCode returns the HTTP status of err, or 0 for transport errors and
// errors that did not come from a Client.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// RetryAfter returns the server's requested delay carried by err, or 0.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// IsAuth reports whether the server rejected the credential (401/403). The
// agent keeps retrying: an operator may rotate or restore the credential.
func IsAuth(err error) bool {
	s := StatusCode(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

// IsPermanent reports whether repeating the same request cannot succeed
// without a change on the server: a 4xx other than auth, 408 and 429.
// Transport errors and 5xx are never permanent.
func IsPermanent(err error) bool {
	s := StatusCode(err)
	if s < 400 || s >= 500 {
		return false
	}
	switch s {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return true
}
