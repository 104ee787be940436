// Package errs holds the typed errors that cross every boundary in anvil: a
// domain function returns one, the command bus carries it over NATS unchanged,
// and the gateway turns it into an RFC 9457 problem. It is pure (no I/O) so
// that domain packages can use it.
package errs

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kind says what went wrong in terms a caller can act on.
type Kind string

const (
	KindValidation   Kind = "validation"          // the input is wrong; Fields says where
	KindNotFound     Kind = "not_found"           // no such resource (or not visible to the caller)
	KindConflict     Kind = "conflict"            // the resource's state forbids the command
	KindPrecondition Kind = "precondition_failed" // an expected version did not match
	KindForbidden    Kind = "forbidden"           // authenticated, but the role does not allow it
	KindUnauthorized Kind = "unauthorized"        // no or unknown credentials
	KindUnavailable  Kind = "unavailable"         // a dependency is down; retrying may help
	KindRateLimited  Kind = "rate_limited"        // too many requests; retry after RetryAfter seconds
	KindInternal     Kind = "internal"            // a bug or an unexpected failure
)

// FieldError names one offending field (a JSON path such as
// "network.vlans[1].id") and why it was refused.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Error is the one error type that crosses service boundaries.
type Error struct {
	Kind    Kind         `json:"kind"`
	Message string       `json:"message"`
	Fields  []FieldError `json:"fields,omitempty"`
	// RetryAfter (seconds) says when a rate-limited request may succeed;
	// HTTP answers carry it as Retry-After.
	RetryAfter int `json:"retry_after,omitempty"`
}

func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return e.Message
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return e.Message + " (" + strings.Join(parts, "; ") + ")"
}

// Is lets errors.Is(err, &errs.Error{Kind: k}) match on kind alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && t.Message == "" && len(t.Fields) == 0
}

func newf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Validation builds a validation error from field errors.
func Validation(fields ...FieldError) *Error {
	return &Error{Kind: KindValidation, Message: "validation failed", Fields: fields}
}

// Invalid is a validation error about a single field.
func Invalid(field, format string, args ...any) *Error {
	return Validation(FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func NotFound(format string, args ...any) *Error     { return newf(KindNotFound, format, args...) }
func Conflict(format string, args ...any) *Error     { return newf(KindConflict, format, args...) }
func Precondition(format string, args ...any) *Error { return newf(KindPrecondition, format, args...) }
func Forbidden(format string, args ...any) *Error    { return newf(KindForbidden, format, args...) }
func Unauthorized(format string, args ...any) *Error { return newf(KindUnauthorized, format, args...) }
func Unavailable(format string, args ...any) *Error  { return newf(KindUnavailable, format, args...) }
func Internal(format string, args ...any) *Error     { return newf(KindInternal, format, args...) }

// RateLimited refuses a request that came too soon; after is rounded up to
// whole seconds (at least one).
func RateLimited(after time.Duration, format string, args ...any) *Error {
	e := newf(KindRateLimited, format, args...)
	e.RetryAfter = max(1, int((after+time.Second-1)/time.Second))
	return e
}

// KindOf reports the kind of err; anything that is not an *Error is internal.
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// Is reports whether err is an *Error of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// As returns err as an *Error, wrapping foreign errors as internal ones.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: KindInternal, Message: err.Error()}
}

// FieldNames lists the fields err refuses, in order (nil for nil or for
// an error that names no field): what a test of a validation compares.
func FieldNames(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, f := range As(err).Fields {
		out = append(out, f.Field)
	}
	return out
}

// Fields collects field errors while validating a whole input, so that a
// caller learns about every problem at once rather than one per attempt.
type Fields []FieldError

// Add records a problem with field.
func (f *Fields) Add(field, format string, args ...any) {
	*f = append(*f, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

// Merge records problems from a nested validation, prefixing their fields.
func (f *Fields) Merge(prefix string, err error) {
	if err == nil {
		return
	}
	e := As(err)
	if e.Kind != KindValidation {
		f.Add(prefix, "%s", e.Message)
		return
	}
	for _, fe := range e.Fields {
		name := fe.Field
		if prefix != "" {
			if strings.HasPrefix(name, "[") {
				name = prefix + name
			} else {
				name = prefix + "." + name
			}
		}
		*f = append(*f, FieldError{Field: name, Reason: fe.Reason})
	}
}

// Err returns nil when nothing was recorded, else a validation error.
func (f Fields) Err() error {
	if len(f) == 0 {
		return nil
	}
	return Validation(f...)
}

// HTTPStatus is the HTTP status every HTTP surface of anvil answers an error
// of kind k with; validation is 422 (the request was understood but refused).
func HTTPStatus(k Kind) int {
	switch k {
	case KindValidation:
		return http.StatusUnprocessableEntity
	case KindNotFound:
		return http.StatusNotFound
	case KindConflict:
		return http.StatusConflict
	case KindPrecondition:
		return http.StatusPreconditionFailed
	case KindForbidden:
		return http.StatusForbidden
	case KindUnauthorized:
		return http.StatusUnauthorized
	case KindUnavailable:
		return http.StatusServiceUnavailable
	case KindRateLimited:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// ProblemType is the RFC 9457 problem type URI of an error kind: one
// vocabulary for every service's HTTP answers
// ("https://anvil.dev/problems/not-found", "…/validation", …).
func ProblemType(k Kind) string {
	if k == "" {
		k = KindInternal
	}
	return "https://anvil.dev/problems/" + strings.ReplaceAll(string(k), "_", "-")
}
