package anvilctl

// Every API call anvilctl makes goes through the typed client
// (github.com/anvil-fleet/anvil/client). This file is the thin adapter
// around it: the client the configuration makes, the one place its errors
// become anvilctl's (apiErr), list paging with --limit and --chunk-size,
// and the one conversion of typed answers into the generic objects the
// printers walk (structToMap, in output.go).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/anvil-fleet/anvil/client"
)

// APIError is a problem the API answered with (RFC 9457), as anvilctl
// prints it: status, title, detail, then each offending field on a line
// of its own. It wraps the client's *client.Problem.
type APIError struct {
	*client.Problem
}

func (e *APIError) Error() string {
	var b strings.Builder
	title := e.Title
	if title == "" {
		title = http.StatusText(e.Status)
	}
	fmt.Fprintf(&b, "%d %s", e.Status, title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "\n  %s: %s", f.Field, f.Reason)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.Problem }

// apiErr is where the client's errors become anvilctl's: a problem the API
// answered with is an *APIError; a request that got no answer is the
// transport's error (a *url.Error: `Get "http://…": dial tcp …`), without
// the client's prefix. Context errors stay in the chain (Ctrl-C exits 130).
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	if p, ok := client.AsProblem(err); ok {
		return &APIError{p}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue
	}
	return err
}

// isStatus says err is a problem of that status.
func isStatus(err error, status int) bool {
	p, ok := client.AsProblem(err)
	return ok && p.Status == status
}

// call passes a typed answer on with its error mapped (apiErr):
// ro, err := call(c.GetRollout(ctx, id)).
func call[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, apiErr(err)
	}
	return v, nil
}

// asMap is call for an answer that is printed: the object as the printers
// walk it.
func asMap[T any](v *T, err error) (map[string]any, error) {
	if err != nil {
		return nil, apiErr(err)
	}
	return structToMap(v), nil
}

// newClient is the typed client of a configuration.
func newClient(cfg Config, hc *http.Client) (*client.Client, error) {
	return client.New(client.Options{BaseURL: cfg.Server, Token: cfg.Token, Org: cfg.Org, HTTPClient: hc,
		UserAgent: "anvilctl/" + clientVersion().Version})
}

// org is the client for the configured organization, or the error that
// says how to name one.
func (a *app) org() (*client.Client, error) {
	if a.cfg.Org == "" {
		return nil, fmt.Errorf("no organization: pass --org, set %s, or put org: in the config file's context", EnvOrg)
	}
	return a.api, nil
}

// pageSize is how many items anvilctl asks for per page.
const pageSize = 500

// listing is how much of a list to read: at most limit items (0: every
// page), asked for chunk at a time (0: pageSize).
type listing struct {
	limit, chunk int
}

// readList reads a list page by page through the client's ListX method
// (page), following next until the limit or the end; more says that items
// remain beyond the limit.
func readList[T any](l listing, page func(client.ListOptions) (*client.Page[T], error)) (items []map[string]any, more bool, err error) {
	cursor := ""
	for {
		size := pageSize
		if l.chunk > 0 {
			size = l.chunk
		}
		if l.limit > 0 {
			size = min(size, l.limit-len(items))
		}
		p, err := page(client.ListOptions{Cursor: cursor, Limit: size})
		if err != nil {
			return nil, false, apiErr(err)
		}
		for _, it := range p.Items {
			items = append(items, structToMap(it))
		}
		if l.limit > 0 && len(items) >= l.limit {
			// a server that does not page answers everything at once
			return items[:l.limit], p.Next != "" || len(items) > l.limit, nil
		}
		if p.Next == "" {
			return items, false, nil
		}
		if p.Next == cursor {
			return nil, false, fmt.Errorf("the server answered the same page again for cursor %s", cursor)
		}
		cursor = p.Next
	}
}

// decode keeps numbers as json.Number so that versions and sizes print
// exactly.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return nil
}
