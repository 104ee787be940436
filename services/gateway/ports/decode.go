package ports

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/command"
	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// errEmptyBody is the validation error of a missing body.
var errEmptyBody = errs.Invalid("body", "a JSON object is required")

// readJSON decodes a request body strictly into v: unknown fields and wrong
// types are validation errors naming the field; an oversized body is 413.
func readJSON(r *http.Request, limit int64, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errTooLarge
		}
		return errs.Invalid("body", "could not be read: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return errEmptyBody
	}
	return command.Decode(body, v)
}

// ifMatch reads an If-Match header holding one ETag: "<version>".
func ifMatch(r *http.Request) (uint64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.Trim(v, `"`), "W/"), 10, 64)
	if err != nil || n == 0 {
		return 0, errs.Invalid("If-Match", `must be one ETag as returned by this API, such as "42"`)
	}
	return n, nil
}

// queryInt reads an optional positive integer query parameter.
func queryInt(r *http.Request, name string, def, max int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > max {
		return 0, errs.Invalid(name, "must be an integer from 1 to %d", max)
	}
	return n, nil
}
