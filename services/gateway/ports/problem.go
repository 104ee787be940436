package ports

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
)

// Problem is an RFC 9457 problem detail, with the offending fields of a
// validation error.
type Problem struct {
	Type     string            `json:"type"`
	Title    string            `json:"title"`
	Status   int               `json:"status"`
	Detail   string            `json:"detail,omitempty"`
	Instance string            `json:"instance,omitempty"`
	Errors   []errs.FieldError `json:"errors,omitempty"`
}

// errTooLarge marks a body over the limit.
var errTooLarge = errors.New("request body too large")

func problemOf(err error, instance string) Problem {
	if errors.Is(err, errTooLarge) {
		return Problem{Type: errs.ProblemType("too_large"), Title: "Request body too large",
			Status: http.StatusRequestEntityTooLarge, Detail: err.Error(), Instance: instance}
	}
	e := errs.As(err)
	status := domain.Status(e.Kind)
	detail := e.Message
	if e.Kind == errs.KindInternal {
		detail = "an internal error occurred; it has been logged"
	}
	return Problem{
		Type:     errs.ProblemType(e.Kind),
		Title:    http.StatusText(status),
		Status:   status,
		Detail:   detail,
		Instance: instance,
		Errors:   e.Fields,
	}
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// encodeError is go-kit's error encoder.
func (h *handler) encodeError(ctx context.Context, err error, w http.ResponseWriter) {
	p := problemOf(err, requestPath(ctx))
	if p.Status >= 500 && p.Status != http.StatusServiceUnavailable {
		h.log.ErrorContext(ctx, "request failed", "path", p.Instance, "err", err)
	}
	if e := errs.As(err); e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeProblem(w, p)
}
