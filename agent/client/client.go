// Package client speaks the boot service's agent API (/agent/v1). It does one
// request per call and never retries: the agent's loops own the retry policy
// because heartbeats, reports and acks each want a different one.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

const (
	// maxInstructionsBody bounds what a confused server can make us buffer.
	maxInstructionsBody = 1 << 20
	maxProblemBody      = 64 << 10
)

// Config configures a Client.
type Config struct {
	// BaseURL is the boot service, e.g. https://boot.example:8443. A path
	// prefix is kept (https://lb/boot → https://lb/boot/agent/v1/...).
	BaseURL     string
	MachineUUID string
	// Credential is sent as a bearer token. It never appears in errors.
	Credential string
	// UserAgent defaults to "anvil-agent/dev".
	UserAgent string
	// HTTPClient defaults to a client with its own transport. Its Timeout
	// should be zero or longer than the long-poll wait; callers bound each
	// request with a context instead.
	HTTPClient *http.Client
}

// Client is safe for concurrent use.
type Client struct {
	base       *url.URL
	uuid       string
	credential string
	userAgent  string
	http       *http.Client
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("boot URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("boot URL %q: want http(s)://host[:port]", cfg.BaseURL)
	}
	if cfg.MachineUUID == "" {
		return nil, errors.New("machine UUID is empty")
	}
	if cfg.Credential == "" {
		return nil, errors.New("agent credential is empty")
	}
	c := &Client{
		base:       u,
		uuid:       cfg.MachineUUID,
		credential: cfg.Credential,
		userAgent:  cfg.UserAgent,
		http:       cfg.HTTPClient,
	}
	if c.userAgent == "" {
		c.userAgent = "anvil-agent/dev"
	}
	if c.http == nil {
		c.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return c, nil
}

// NewHTTPClient returns an HTTP client that trusts the PEM bundle in caFile
// in addition to the system roots; an empty caFile means system roots only.
func NewHTTPClient(caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificates found", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}

// Heartbeat tells the boot service the agent is alive.
func (c *Client) Heartbeat(ctx context.Context, hb api.Heartbeat) error {
	// The contract says 204; any 2xx is taken as success so a server that
	// answers 200 does not look like an outage.
	_, err := c.do(ctx, "heartbeat", http.MethodPost, c.machinePath("heartbeat"), nil, hb)
	return err
}

// Report sends the hardware inventory, reboot indicator and startup log.
func (c *Client) Report(ctx context.Context, r api.Report) error {
	_, err := c.do(ctx, "report", http.MethodPost, c.machinePath("report"), nil, r)
	return err
}

// PollResult is what one long-poll returned. Body is the raw 200 body, kept so
// a malformed response can be logged; it is nil on 204.
type PollResult struct {
	Instructions []api.Instruction
	Invalid      []api.InvalidInstruction
	Body         []byte
}

// PollInstructions long-polls for instructions. The server holds the request
// for up to wait and answers 204 when nothing arrived; that returns an empty
// result. A 200 whose body is not an instructions document returns an error
// wrapping api.ErrMalformed together with the raw body in the result.
func (c *Client) PollInstructions(ctx context.Context, wait time.Duration) (PollResult, error) {
	q := url.Values{"wait": {strconv.Itoa(int(wait.Round(time.Second) / time.Second))}}
	resp, err := c.do(ctx, "instructions", http.MethodGet, c.machinePath("instructions"), q, nil, http.StatusOK, http.StatusNoContent)
	if err != nil {
		return PollResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return PollResult{}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxInstructionsBody+1))
	if err != nil {
		return PollResult{}, fmt.Errorf("instructions: reading body: %w", err)
	}
	if len(body) > maxInstructionsBody {
		return PollResult{Body: body[:1024]}, fmt.Errorf("instructions: %w: body larger than %d bytes", api.ErrMalformed, maxInstructionsBody)
	}
	valid, invalid, err := api.DecodeInstructions(body)
	if err != nil {
		return PollResult{Body: body}, fmt.Errorf("instructions: %w", err)
	}
	return PollResult{Instructions: valid, Invalid: invalid, Body: body}, nil
}

// Ack reports the status of instruction id.
func (c *Client) Ack(ctx context.Context, id string, ack api.Ack) error {
	_, err := c.do(ctx, "ack", http.MethodPost, c.machinePath("instructions", id, "ack"), nil, ack)
	return err
}

func (c *Client) machinePath(elems ...string) string {
	parts := append([]string{"agent", "v1", "machines", c.uuid}, elems...)
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// do sends one request. On a wanted status (any 2xx when want is empty) it
// returns the response, with the body still open only for a wanted non-204
// status; otherwise the body is drained, closed, and an *Error returned.
func (c *Client) do(ctx context.Context, op, method, path string, query url.Values, body any, want ...int) (*http.Response, error) {
	u := *c.base
	// The escaped path keeps "%2F" in ids intact; the plain one is for display.
	u.RawPath = strings.TrimSuffix(u.EscapedPath(), "/") + "/" + path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	}
	u.RawQuery = query.Encode()

	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding body: %w", op, err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.credential)
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error repeats the URL, which holds no secret; the header never shows.
		return nil, &Error{Op: op, Err: err}
	}
	if len(want) == 0 && resp.StatusCode/100 == 2 {
		drain(resp.Body)
		return resp, nil
	}
	for _, w := range want {
		if resp.StatusCode == w {
			if resp.StatusCode == http.StatusNoContent {
				drain(resp.Body)
			}
			return resp, nil
		}
	}
	defer drain(resp.Body)
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	e := &Error{Op: op, StatusCode: resp.StatusCode, Problem: api.DecodeProblem(raw)}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	if e.Problem == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		e.Err = fmt.Errorf("unexpected status %s", resp.Status)
	}
	return nil, e
}

func drain(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, maxProblemBody))
	_ = rc.Close()
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 means absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		// Cap before multiplying: a silly value must not overflow into the past.
		s = min(s, 24*60*60)
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
