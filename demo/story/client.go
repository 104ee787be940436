package story

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls the gateway's HTTP API (/api/v1) with one bearer token.
type Client struct {
	Base  string // http://host:port
	Token string
	HTTP  *http.Client
	// Header, if set, adds headers to every request (a traceparent, say).
	Header func(*http.Request)
}

// Problem is an RFC 9457 answer of the API.
type Problem struct {
	Method, Path string
	Status       int    `json:"status"`
	Title        string `json:"title"`
	Detail       string `json:"detail"`
	Errors       []struct {
		Field  string `json:"field"`
		Reason string `json:"reason"`
	} `json:"errors"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d %s", p.Method, p.Path, p.Status, p.Title)
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, f := range p.Errors {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Reason)
	}
	return b.String()
}

// StatusOf returns the HTTP status of a *Problem, or 0.
func StatusOf(err error) int {
	if p, ok := err.(*Problem); ok {
		return p.Status
	}
	return 0
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "anvil-demo")
	if c.Header != nil {
		c.Header(req)
	}
	return req, nil
}

// Do sends a request with a JSON body (nil: none) and decodes a JSON answer
// into out (nil: discarded). An error answer is a *Problem.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	res, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode >= 400 {
		p := &Problem{Method: method, Path: path, Status: res.StatusCode, Title: http.StatusText(res.StatusCode)}
		if json.Unmarshal(data, p) != nil || p.Detail == "" && len(p.Errors) == 0 {
			p.Detail = strings.TrimSpace(string(data))
		}
		p.Status = res.StatusCode
		return p
	}
	if out != nil && len(data) > 0 {
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = append((*raw)[:0], data...)
			return nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}

// Retry repeats Do while the answer is 503 (a service that does not answer
// yet) or 404 from a projection that has not caught up, until ctx ends.
func (c *Client) Retry(ctx context.Context, method, path string, body, out any, retryOn ...int) error {
	if len(retryOn) == 0 {
		retryOn = []int{503}
	}
	for {
		err := c.Do(ctx, method, path, body, out)
		st := StatusOf(err)
		again := false
		for _, r := range retryOn {
			again = again || st == r
		}
		if !again {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SSE is one Server-Sent Event.
type SSE struct {
	ID, Event, Data string
}

// Stream opens a Server-Sent Events stream and calls fn for each event
// until the stream ends, fn returns false, or ctx ends.
func (c *Client) Stream(ctx context.Context, path, lastID string, fn func(SSE) bool) error {
	req, err := c.newRequest(ctx, "GET", path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode >= 400 {
		data, _ := io.ReadAll(res.Body)
		p := &Problem{Method: "GET", Path: path, Status: res.StatusCode, Title: http.StatusText(res.StatusCode)}
		_ = json.Unmarshal(data, p)
		p.Status = res.StatusCode
		return p
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev SSE
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Data != "" || ev.Event != "" {
				if !fn(ev) {
					return nil
				}
			}
			ev = SSE{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			ev.ID = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			ev.Event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			if ev.Data != "" {
				ev.Data += "\n"
			}
			ev.Data += strings.TrimPrefix(line[5:], " ")
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}
