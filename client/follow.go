package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// LogEventKind is what a LogEvent of FollowOperationLog carries.
type LogEventKind string

const (
	// LogEventEntry: an entry of the log (Index, Entry).
	LogEventEntry LogEventKind = "entry"
	// LogEventStatus: the operation's status (Status, Next), first after
	// the backlog and then whenever it changes. A failed rollout waits for
	// a retry or an abort: the stream stays open.
	LogEventStatus LogEventKind = "status"
	// LogEventEnd: the operation is over and no entry will follow (Status,
	// Next); the last event of the stream.
	LogEventEnd LogEventKind = "end"
)

// LogEvent is one event of an operation's live log (FollowOperationLog).
type LogEvent struct {
	Kind LogEventKind
	// Index is an entry's index in the log (0 first): follow again from
	// Index+1 to resume after it.
	Index int
	Entry LogEntry
	// Status is the operation's status (LogEventStatus, LogEventEnd).
	Status string
	// Next is the index of the entry that follows (LogEventStatus,
	// LogEventEnd).
	Next int
}

// FollowOperationLog follows an operation's log live, from entry from (0:
// the start), as Server-Sent Events (GET …/operations/{id}/log with
// Accept: text/event-stream): each entry, the operation's status when it
// changes, and the end. The sequence ends after the LogEventEnd event,
// when the loop breaks, or when the stream closes early (a gateway that
// restarts): then no LogEventEnd was seen, and the caller may follow
// again from the last entry's Index+1. An error is yielded once, last: a
// *Problem for an error answer before the stream starts (a missing
// operation, an unavailable service) or a failure the gateway reports in
// the stream (its `error` event), ctx's error when ctx ends, or the
// connection's.
//
// The stream outlives any single request timeout: give the client an
// HTTPClient without Timeout, and end the stream with ctx.
func (c *Client) FollowOperationLog(ctx context.Context, id string, from int, opts ...CallOption) iter.Seq2[LogEvent, error] {
	return func(yield func(LogEvent, error) bool) {
		p, err := c.orgPath("operations", id, "log")
		if err != nil {
			yield(LogEvent{}, err)
			return
		}
		r := request{method: "GET", path: p, accept: "text/event-stream"}
		if from > 0 {
			r.query = url.Values{"after": {strconv.Itoa(from)}}
		}
		res, err := c.open(ctx, r, opts)
		if err != nil {
			yield(LogEvent{}, err)
			return
		}
		defer res.Body.Close()
		if err := readLogEvents(res.Body, r, yield); err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("client: %s %s: %w", r.method, r.path, ctx.Err())
			}
			yield(LogEvent{}, err)
		}
	}
}

// open sends a request and returns the answer unread if it is a success;
// anything else is a *Problem.
func (c *Client) open(ctx context.Context, r request, opts []CallOption) (*http.Response, error) {
	if r.query == nil {
		r.query = url.Values{}
	}
	r.header = http.Header{}
	for _, o := range opts {
		o(&r)
	}
	u := strings.TrimSuffix(c.base.String(), "/") + r.path // r.path is escaped
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	req.Header = r.header
	req.Header.Set("Accept", r.accept)
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	if c.opts.UserAgent != "" {
		req.Header.Set("User-Agent", c.opts.UserAgent)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", r.method, r.path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		defer res.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return nil, problemOf(res, data, r)
	}
	return res, nil
}

// readLogEvents reads Server-Sent Events of an operation's log from body
// and yields them; it returns nil at the end event, at the end of the
// body, or when yield returns false, and a *Problem for an error event.
func readLogEvents(body io.Reader, r request, yield func(LogEvent, error) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, ":") { // a comment: the gateway is waiting
			continue
		}
		if line != "" {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				id = v
			case "event":
				event = v
			case "data":
				data = append(data, v)
			}
			continue
		}
		if len(data) == 0 && event == "" {
			continue
		}
		raw := []byte(strings.Join(data, "\n"))
		ev, kind, evID := LogEvent{}, event, id
		id, event, data = "", "", nil
		switch kind {
		case "", "message":
			ev.Kind = LogEventEntry
			if err := json.Unmarshal(raw, &ev.Entry); err != nil {
				return fmt.Errorf("client: %s %s: an entry of the stream is not what the client expects: %w", r.method, r.path, err)
			}
			n, err := strconv.Atoi(evID)
			if err != nil {
				return fmt.Errorf("client: %s %s: an entry of the stream has the id %q, not its index", r.method, r.path, evID)
			}
			ev.Index = n
		case "status", "end":
			ev.Kind = LogEventKind(kind)
			var st struct {
				Status string `json:"status"`
				Next   int    `json:"next"`
			}
			if err := json.Unmarshal(raw, &st); err != nil {
				return fmt.Errorf("client: %s %s: a %s event of the stream is not what the client expects: %w", r.method, r.path, kind, err)
			}
			ev.Status, ev.Next = st.Status, st.Next
		case "error":
			p := &Problem{}
			if err := json.Unmarshal(raw, p); err != nil || p.Status == 0 {
				// the gateway writes a problem; anything else failed on the way
				p = &Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadGateway), Status: http.StatusBadGateway, Detail: string(raw)}
			}
			p.Method, p.Path = r.method, r.path
			return p
		default:
			continue // an event this client does not know
		}
		if !yield(ev, nil) || ev.Kind == LogEventEnd {
			return nil
		}
	}
	return sc.Err()
}

// String is the entry as one line: its time, node, step, outcome and
// message.
func (e LogEntry) String() string {
	var b strings.Builder
	b.WriteString(e.At.UTC().Format(time.RFC3339))
	if e.Node != "" {
		b.WriteString(" " + e.Node)
	}
	if e.Step != "" {
		b.WriteString(" " + e.Step)
	}
	b.WriteString(" " + e.Outcome)
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}
