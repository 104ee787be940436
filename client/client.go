// Package client is a typed Go client of anvil's HTTP API (the gateway):
// one method per operation of /openapi.json, plain JSON types of its own,
// errors as *Problem (RFC 9457), and lists as pages that AllX iterators
// follow to the end.
//
//	c, err := client.New(client.Options{BaseURL: "http://127.0.0.1:8080", Token: token, Org: "acme"})
//	if err != nil { … }
//	for m, err := range c.AllMachines(ctx, client.MachineFilter{Pool: "workers"}) {
//		if err != nil { … }
//		fmt.Println(m.UUID, m.Status)
//	}
//	_, err = c.GetMachine(ctx, "4c4c4544-…")
//	if client.IsNotFound(err) { … }
//
// The client is kept by hand; TestClientCoversDocument checks it against
// the document the gateway serves (every operation has a method, every
// JSON field a client type names exists in the operation's schema).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Options configure a Client.
type Options struct {
	// BaseURL is the gateway's URL, such as http://127.0.0.1:8080 (a path
	// prefix, for a gateway behind a proxy, is kept).
	BaseURL string
	// Token is the API token (or the bootstrap admin token), sent as
	// Authorization: Bearer.
	Token string
	// HTTPClient sends the requests; nil: http.DefaultClient.
	HTTPClient *http.Client
	// Org is the organization the organization's operations address;
	// InOrg returns a client for another.
	Org string
	// UserAgent, if set, is sent as User-Agent.
	UserAgent string
}

// Client calls the API. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
	http *http.Client
}

// New returns a client, or an error naming what is wrong with o.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(o.BaseURL, "/"))
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: BaseURL %q: must be an http or https URL such as http://127.0.0.1:8080", o.BaseURL)
	}
	c := &Client{base: u, opts: o, http: o.HTTPClient}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	return c, nil
}

// InOrg returns a client like c for another organization.
func (c *Client) InOrg(org string) *Client {
	cc := *c
	cc.opts.Org = org
	return &cc
}

// Org is the organization c addresses.
func (c *Client) Org() string { return c.opts.Org }

// CallOption changes one request.
type CallOption func(*request)

// IfMatch makes a write conditional on the version a previous answer
// carried (its "version", also its ETag): a stale one fails with a
// *Problem of status 412 (IsPreconditionFailed).
func IfMatch(version uint64) CallOption {
	return func(r *request) {
		if version > 0 {
			r.header.Set("If-Match", strconv.Quote(strconv.FormatUint(version, 10)))
		}
	}
}

// IdempotencyKey makes a POST safe to retry: a retry with the same key gets
// the first answer.
func IdempotencyKey(key string) CallOption {
	return func(r *request) {
		if key != "" {
			r.header.Set("Idempotency-Key", key)
		}
	}
}

// At reads a resource as it was at a time (RFC 3339) or a stream sequence
// (a version): GetOrg, GetMachine, GetCluster, GetPool, GetRollout,
// GetOperation.
func At(at string) CallOption {
	return func(r *request) {
		if at != "" {
			r.query.Set("at", at)
		}
	}
}

// AtTime is At for a time.
func AtTime(t time.Time) CallOption { return At(t.UTC().Format(time.RFC3339Nano)) }

// Header sets a request header (a traceparent, say).
func Header(name, value string) CallOption {
	return func(r *request) { r.header.Set(name, value) }
}

type request struct {
	method, path string
	query        url.Values
	header       http.Header
	body         any // JSON-encoded unless nil
	noAuth       bool
	accept       string
}

// Problem is an API error: an RFC 9457 problem detail. Every answer that
// is not a success is one (an answer that is not a problem document, from
// a proxy say, is made into one with its status).
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
	// RetryAfter is the Retry-After header of a 429 or 503, if any.
	RetryAfter time.Duration `json:"-"`
	// Method and Path are the request's.
	Method string `json:"-"`
	Path   string `json:"-"`
}

// FieldError is one offending field of a validation problem (422).
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", p.Method, p.Path, p.Status)
	switch {
	case p.Detail != "":
		b.WriteString(" " + p.Detail)
	case p.Title != "":
		b.WriteString(" " + p.Title)
	}
	for _, f := range p.Errors {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Reason)
	}
	return b.String()
}

// Field returns the reason given for a field of a validation problem.
func (p *Problem) Field(name string) (string, bool) {
	for _, f := range p.Errors {
		if f.Field == name {
			return f.Reason, true
		}
	}
	return "", false
}

// AsProblem returns the *Problem in err's chain.
func AsProblem(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

func hasStatus(err error, status int) bool {
	p, ok := AsProblem(err)
	return ok && p.Status == status
}

// IsNotFound: 404 (also a resource of another organization).
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict: 409, a state that forbids the command.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsPreconditionFailed: 412, a stale If-Match.
func IsPreconditionFailed(err error) bool { return hasStatus(err, http.StatusPreconditionFailed) }

// IsValidation: 422; the problem's Errors name the fields.
func IsValidation(err error) bool { return hasStatus(err, http.StatusUnprocessableEntity) }

// IsUnauthorized: 401, no or an unknown token.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden: 403, a role too weak.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsUnavailable: 503, a service that does not answer; retry.
func IsUnavailable(err error) bool { return hasStatus(err, http.StatusServiceUnavailable) }

// orgPath is the path of the client's organization joined with parts,
// each escaped.
func (c *Client) orgPath(parts ...string) (string, error) {
	if c.opts.Org == "" {
		return "", errors.New("client: no organization: set Options.Org or use InOrg")
	}
	return "/api/v1/orgs/" + join(append([]string{c.opts.Org}, parts...)...), nil
}

func join(parts ...string) string {
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// call sends a request and decodes a success into out (unless nil).
func (c *Client) call(ctx context.Context, r request, out any, opts ...CallOption) error {
	if r.query == nil {
		r.query = url.Values{}
	}
	r.header = http.Header{}
	for _, o := range opts {
		o(&r)
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
		}
		body = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(c.base.String(), "/") + r.path // r.path is escaped
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	req.Header = r.header
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	if c.opts.Token != "" && !r.noAuth {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	if c.opts.UserAgent != "" {
		req.Header.Set("User-Agent", c.opts.UserAgent)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("client: %s %s: reading the answer: %w", r.method, r.path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return problemOf(res, data, r)
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = data
		return nil
	case *string:
		*o = string(data)
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("client: %s %s: the answer is not what the client expects: %w", r.method, r.path, err)
	}
	return nil
}

func problemOf(res *http.Response, data []byte, r request) *Problem {
	p := &Problem{}
	if err := json.Unmarshal(data, p); err != nil || p.Status == 0 {
		detail := strings.TrimSpace(string(data))
		if len(detail) > 512 {
			detail = detail[:512] + "…"
		}
		p = &Problem{Type: "about:blank", Title: http.StatusText(res.StatusCode), Detail: detail}
	}
	p.Status, p.Method, p.Path = res.StatusCode, r.method, r.path
	if s := res.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			p.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return p
}

// queryOf encodes a filter's fields tagged `query:"name"`: strings and
// string types (skipped when empty), ints (skipped when 0), times (RFC
// 3339, skipped when zero) and string slices (joined with commas).
func queryOf(filter any) url.Values {
	q := url.Values{}
	v := reflect.ValueOf(filter)
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f, fv := t.Field(i), v.Field(i)
			if f.Anonymous && fv.Kind() == reflect.Struct {
				walk(fv)
				continue
			}
			name := f.Tag.Get("query")
			if name == "" {
				continue
			}
			switch x := fv.Interface().(type) {
			case time.Time:
				if !x.IsZero() {
					q.Set(name, x.UTC().Format(time.RFC3339Nano))
				}
			case []string:
				if len(x) > 0 {
					q.Set(name, strings.Join(x, ","))
				}
			default:
				switch fv.Kind() {
				case reflect.String:
					if fv.String() != "" {
						q.Set(name, fv.String())
					}
				case reflect.Int:
					if fv.Int() != 0 {
						q.Set(name, strconv.FormatInt(fv.Int(), 10))
					}
				}
			}
		}
	}
	walk(v)
	return q
}
