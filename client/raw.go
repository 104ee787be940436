package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// GetRaw reads a path of the API as the JSON the gateway answers, byte for
// byte: for a read no method covers, or to see every field of an answer
// (the client's types hold only the fields they name). path is absolute
// and escaped as in a URL, such as /api/v1/orgs/acme/machines?limit=500;
// an error answer is a *Problem.
func (c *Client) GetRaw(ctx context.Context, path string, opts ...CallOption) (json.RawMessage, error) {
	p, q, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("client: GetRaw %q: the path must start with /", path)
	}
	query, err := url.ParseQuery(q)
	if err != nil {
		return nil, fmt.Errorf("client: GetRaw %q: the query: %w", path, err)
	}
	var b []byte
	if err := c.call(ctx, request{method: "GET", path: p, query: query}, &b, opts...); err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}
