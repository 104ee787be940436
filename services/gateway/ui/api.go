package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// problem is the API's RFC 9457 answer, with the offending fields.
type problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Errors []fieldError `json:"errors"`
}

type fieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// apiError is an API answer that is not a success.
type apiError struct {
	problem
	method, path string
}

func (e *apiError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.Status, e.Detail)
	}
	return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.Status, e.Title)
}

// statusOf is the HTTP status of an API error (500 for anything else).
func statusOf(err error) int {
	if e, ok := err.(*apiError); ok {
		return e.Status
	}
	return http.StatusInternalServerError
}

// recorder is the ResponseWriter of an in-process API call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// call is one request to the gateway's API, in-process, with the
// session's token: the API decides, exactly as for any other client.
type call struct {
	method, path string
	query        url.Values
	body         any // JSON-encoded unless nil
	ifMatch      uint64
	idempotency  string
}

// reply is a successful API answer.
type reply struct {
	status  int
	header  http.Header
	body    []byte
	version uint64 // from the ETag
}

// do runs c against the API with token and decodes a success into out
// (unless nil); any other answer is an *apiError.
func (c *Console) do(ctx context.Context, token string, cl call, out any) (reply, error) {
	var rd io.Reader = http.NoBody
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return reply{}, err
		}
		rd = bytes.NewReader(b)
	}
	u := cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, rd)
	if err != nil {
		return reply{}, err
	}
	req.RemoteAddr = "console"
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.ifMatch > 0 {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatUint(cl.ifMatch, 10)))
	}
	if cl.idempotency != "" {
		req.Header.Set("Idempotency-Key", cl.idempotency)
	}
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	rep := reply{status: rec.status, header: rec.header, body: rec.body.Bytes()}
	if et := strings.Trim(strings.TrimPrefix(rec.header.Get("ETag"), "W/"), `"`); et != "" {
		rep.version, _ = strconv.ParseUint(et, 10, 64)
	}
	if rec.status >= 300 {
		e := &apiError{method: cl.method, path: cl.path}
		if err := json.Unmarshal(rep.body, &e.problem); err != nil || e.Status == 0 {
			e.problem = problem{Status: rec.status, Title: http.StatusText(rec.status), Detail: strings.TrimSpace(string(rep.body))}
		}
		return rep, e
	}
	if out != nil && len(rep.body) > 0 {
		if err := json.Unmarshal(rep.body, out); err != nil {
			return rep, fmt.Errorf("the API's answer to %s %s is not what the console expects: %w", cl.method, cl.path, err)
		}
	}
	return rep, nil
}

// orgPath is /api/v1/orgs/{org} followed by the escaped segments.
func orgPath(org string, segs ...string) string {
	var b strings.Builder
	b.WriteString("/api/v1/orgs/")
	b.WriteString(url.PathEscape(org))
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
