package anvilctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// APIError is an RFC 9457 problem the API answered with.
type APIError struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors"`
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "\n  %s: %s", f.Field, f.Reason)
	}
	return b.String()
}

// client calls the gateway.
type client struct {
	cfg  Config
	http *http.Client
}

// response is an answer that was not an error.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// orgPath is a path under /api/v1/orgs/{org}.
func (c *client) orgPath(format string, args ...any) (string, error) {
	if c.cfg.Org == "" {
		return "", fmt.Errorf("no organization: pass --org, set %s, or put org: in the config file", EnvOrg)
	}
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = url.PathEscape(s)
		}
	}
	return "/api/v1/orgs/" + url.PathEscape(c.cfg.Org) + fmt.Sprintf(format, args...), nil
}

func (c *client) request(ctx context.Context, method, path string, q url.Values, body any, hdr map[string]string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.cfg.Server + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "anvilctl")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req, nil
}

// do sends a request and returns the answer, or an *APIError for a
// problem.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body any, hdr map[string]string) (*response, error) {
	req, err := c.request(ctx, method, path, q, body, hdr)
	if err != nil {
		return nil, err
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 400 {
		return nil, problem(res, data)
	}
	return &response{Status: res.StatusCode, Header: res.Header, Body: data}, nil
}

func problem(res *http.Response, data []byte) error {
	e := &APIError{Status: res.StatusCode, Title: http.StatusText(res.StatusCode)}
	if strings.Contains(res.Header.Get("Content-Type"), "json") {
		_ = json.Unmarshal(data, e)
	} else if s := strings.TrimSpace(string(data)); s != "" && len(s) < 500 {
		e.Detail = s
	}
	return e
}

// get decodes a JSON answer into a generic value.
func (c *client) get(ctx context.Context, path string, q url.Values) (map[string]any, *response, error) {
	res, err := c.do(ctx, "GET", path, q, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	var v map[string]any
	if err := decode(res.Body, &v); err != nil {
		return nil, nil, err
	}
	return v, res, nil
}

// decode keeps numbers as json.Number so that versions and sizes print
// exactly.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the server answered with something that is not JSON: %w", err)
	}
	return nil
}

func isStatus(err error, status int) bool {
	e, ok := err.(*APIError)
	return ok && e.Status == status
}
