package ports

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// logQuery is a read of an operation's log: one page, or (stream) a live
// Server-Sent Events stream starting at req.After.
type logQuery struct {
	req    rolloutapi.LogRequest
	stream bool
}

// logStream is the endpoint's answer to a stream request: the first page,
// read before any byte is written so that a missing operation or an
// unavailable service is still an ordinary problem answer.
type logStream struct {
	req   rolloutapi.LogRequest
	first rolloutapi.LogPage
}

// wantsEventStream reports whether the Accept header asks for
// text/event-stream.
func wantsEventStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

func (h *handler) logRoute(ro rolloutapi.Client, path string) route {
	rt := route{Method: "GET", Path: path, Min: domain.RoleViewer, Stream: true,
		Summary: "An operation's log from entry ?after= (its index; 0: the start): a JSON page, " +
			"or with Accept: text/event-stream a live stream of Server-Sent Events (id: the entry's index; Last-Event-ID resumes after it), " +
			"with `status` events when the status changes, that ends with an `end` event",
		Response: rolloutapi.LogPage{}, Status: 200, Query: []string{"after", "limit"}, Limit: listPage,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			var f errs.Fields
			q := logQuery{req: rolloutapi.LogRequest{Org: r.PathValue("org"), ID: r.PathValue("id")}, stream: wantsEventStream(r)}
			checkID(&f, q.req.ID)
			if s := r.URL.Query().Get("after"); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil || n < 0 {
					f.Add("after", "must be an entry index (0: the start), such as the next of a previous page")
				}
				q.req.After = n
			}
			limit, err := listPage.read(r)
			f.Merge("", err)
			q.req.Limit = limit
			if q.stream {
				if last, ok, err := lastEventID(r); err != nil {
					f.Merge("", err)
				} else if ok {
					q.req.After = last + 1
				}
			}
			return q, f.Err()
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			q := req.(logQuery)
			page, err := ro.Log(ctx, q.req)
			if err != nil {
				return nil, err
			}
			if page.Entries == nil {
				page.Entries = []rolloutapi.Entry{}
			}
			if q.stream {
				return logStream{req: q.req, first: page}, nil
			}
			return page, nil
		},
	}
	jsonEnc := h.encoder(rt)
	rt.Encode = func(ctx context.Context, w http.ResponseWriter, resp any) error {
		ls, ok := resp.(logStream)
		if !ok {
			return jsonEnc(ctx, w, resp)
		}
		h.streamLog(ctx, w, ro, ls)
		return nil
	}
	return rt
}

// streamLog writes the log as Server-Sent Events: each entry as an event
// whose id is its index, flushed at once; the operation's status as a
// `status` event, first and whenever it changes; an empty long poll writes
// a comment (which also finds out that a client went away); the end of
// the operation is an `end` event, a failure an `error` event with a
// problem.
// It returns when the operation is over, the client has gone, or the
// service fails.
func (h *handler) streamLog(ctx context.Context, w http.ResponseWriter, ro rolloutapi.Client, ls logStream) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives any server write timeout
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	req, page := ls.req, ls.first
	status := ""
	for {
		for i, e := range page.Entries {
			data, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", req.After+i, data); err != nil {
				return
			}
		}
		if page.Next > req.After {
			req.After = page.Next
		} else {
			req.After += len(page.Entries)
		}
		if page.Status != status && !page.Final {
			// the operation's status, first and whenever it changes
			status = page.Status
			data, _ := json.Marshal(map[string]any{"status": page.Status, "next": req.After})
			if _, err := fmt.Fprintf(w, "event: status\ndata: %s\n\n", data); err != nil {
				return
			}
		}
		// Final: the operation is over; a full page may still have more behind it.
		if page.Final && len(page.Entries) < req.Limit {
			data, _ := json.Marshal(map[string]any{"status": page.Status, "next": req.After})
			_, _ = fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
			_ = rc.Flush()
			return
		}
		if len(page.Entries) == 0 {
			if _, err := io.WriteString(w, ": waiting\n\n"); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		wait := req
		wait.Wait = h.LogWait
		var err error
		page, err = ro.Log(ctx, wait)
		if err != nil {
			if ctx.Err() != nil {
				return // the client went away
			}
			p := problemOf(err, requestPath(ctx))
			if p.Status >= 500 && p.Status != http.StatusServiceUnavailable {
				h.log.ErrorContext(ctx, "log stream failed", "path", p.Instance, "err", err)
			}
			data, _ := json.Marshal(p)
			_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
			_ = rc.Flush()
			return
		}
	}
}
