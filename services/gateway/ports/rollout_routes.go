package ports

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// RolloutStart is the body of POST /api/v1/orgs/{org}/rollouts: roll a
// pool revision out by hand, to the whole pool or to one machine.
type RolloutStart struct {
	Pool string `json:"pool"`
	// Revision is the pool revision to roll out; 0 (or absent): the latest.
	Revision int `json:"revision,omitempty"`
	// Machine, if set, rolls out only this machine (its UUID).
	Machine string `json:"machine,omitempty"`
	// After is a rollout that must succeed before this one moves.
	After string `json:"after,omitempty"`
}

// RolloutControl is the optional body of POST …/rollouts/{id}/pause,
// /resume, /abort and /retry.
type RolloutControl struct {
	Reason string `json:"reason,omitempty"`
}

var (
	// idPattern is a rollout or operation id, as the rollout service
	// accepts them.
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	poolPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

	rolloutStatuses = []string{"active", string(rolloutapi.StatusPending), string(rolloutapi.StatusRunning), string(rolloutapi.StatusPaused), string(rolloutapi.StatusSucceeded), string(rolloutapi.StatusFailed), string(rolloutapi.StatusAborted)}
	// operationStatuses: a rollout's, and a machine operation's, which
	// adds cancelled (a maintenance or deletion called off).
	operationStatuses = append(slices.Clone(rolloutStatuses), string(rolloutapi.OperationCancelled))
	operationKinds    = []string{rolloutapi.KindRollout, rolloutapi.KindMaintenanceEnter, rolloutapi.KindMaintenanceExit, rolloutapi.KindDeletion, rolloutapi.KindDeletionAbort, rolloutapi.KindDeletionFinish, rolloutapi.KindUnassign, rolloutapi.KindForceUnassignCleanup, rolloutapi.KindForcedDeletionCleanup, rolloutapi.KindMachine}
)

// checkID validates the {id} path value.
func checkID(f *errs.Fields, id string) {
	if !idPattern.MatchString(id) {
		f.Add("id", "must be 1 to 128 letters, digits, '-' or '_'")
	}
}

// checkAt validates ?at=.
func checkAt(f *errs.Fields, at string) {
	if at == "" {
		return
	}
	if _, _, err := rev.ParseAt(at); err != nil {
		f.Add("at", "%v", err)
	}
}

// listRequest reads the filters of a rollout or operation list.
func listRequest(r *http.Request, kinds bool) (rolloutapi.ListRequest, error) {
	q := r.URL.Query()
	var f errs.Fields
	req := rolloutapi.ListRequest{Org: r.PathValue("org"), Pool: q.Get("pool"), Status: q.Get("status"), Cursor: q.Get("cursor")}
	if req.Pool != "" && !poolPattern.MatchString(req.Pool) {
		f.Add("pool", "must be a pool name (an RFC 1123 label)")
	}
	switch {
	case req.Status == "":
	case !kinds && !slices.Contains(rolloutStatuses, req.Status):
		f.Add("status", "must be one of %s", strings.Join(rolloutStatuses, ", "))
	case kinds && !slices.Contains(operationStatuses, req.Status):
		f.Add("status", "must be one of %s", strings.Join(operationStatuses, ", "))
	}
	if kinds {
		req.Kind = q.Get("kind")
		if req.Kind != "" && !slices.Contains(operationKinds, req.Kind) {
			f.Add("kind", "must be one of %s", strings.Join(operationKinds, ", "))
		}
	}
	limit, err := rolloutPage.read(r)
	f.Merge("", err)
	req.Limit = limit
	return req, f.Err()
}

type controlReq struct {
	call func(context.Context, rolloutapi.ControlRequest) (rolloutapi.Rollout, error)
	req  rolloutapi.ControlRequest
}

func (h *handler) rolloutRoutes() []route {
	ro := rolloutapi.Client{NC: h.NC}
	const (
		rollouts   = "/api/v1/orgs/{org}/rollouts"
		one        = rollouts + "/{id}"
		operations = "/api/v1/orgs/{org}/operations"
		operation  = operations + "/{id}"
	)
	V, O := domain.RoleViewer, domain.RoleOperator
	get := func(r *http.Request) (rolloutapi.GetRequest, error) {
		var f errs.Fields
		req := rolloutapi.GetRequest{Org: r.PathValue("org"), ID: r.PathValue("id"), At: r.URL.Query().Get("at")}
		checkID(&f, req.ID)
		checkAt(&f, req.At)
		return req, f.Err()
	}
	control := func(verb, summary string, call func(context.Context, rolloutapi.ControlRequest) (rolloutapi.Rollout, error)) route {
		return route{Method: "POST", Path: one + "/" + verb, Min: O, Summary: summary, Request: RolloutControl{}, BodyOptional: true, Conditional: true,
			Response: rolloutapi.Rollout{}, Status: 200,
			Decode: func(ctx context.Context, r *http.Request) (any, error) {
				var f errs.Fields
				req := rolloutapi.ControlRequest{Org: r.PathValue("org"), ID: r.PathValue("id"), By: principalOf(ctx).Actor()}
				checkID(&f, req.ID)
				expected, err := ifMatch(r)
				f.Merge("", err)
				req.ExpectedVersion = expected
				var b RolloutControl
				if err := readOptionalJSON(r, h.BodyLimit, &b); err != nil {
					return nil, err
				}
				if len(b.Reason) > 1024 {
					f.Add("reason", "must be at most 1024 characters")
				}
				req.Reason = b.Reason
				return controlReq{call: call, req: req}, f.Err()
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				c := req.(controlReq)
				out, err := c.call(ctx, c.req)
				if err == nil {
					h.writes.note(ctx, marksRollout, out.Version)
				}
				return out, err
			}}
	}
	return []route{
		{Method: "GET", Path: rollouts, Min: V, Summary: "List rollouts, newest first (filters: pool, status or \"active\"; cursor pagination)",
			Response: rolloutapi.RolloutList{}, Status: 200, Query: []string{"pool", "status", "cursor", "limit"}, Limit: rolloutPage,
			Decode: func(_ context.Context, r *http.Request) (any, error) { return listRequest(r, false) },
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return ro.List(ctx, req.(rolloutapi.ListRequest))
			}},
		{Method: "POST", Path: rollouts, Min: O, Summary: "Start a rollout by hand: a pool revision to the whole pool or to one machine, optionally after another rollout",
			Request: RolloutStart{}, Response: rolloutapi.Rollout{}, Status: 201,
			Decode: func(ctx context.Context, r *http.Request) (any, error) {
				var b RolloutStart
				if err := readJSON(r, h.BodyLimit, &b); err != nil {
					return nil, err
				}
				var f errs.Fields
				switch {
				case b.Pool == "":
					f.Add("pool", "is required")
				case !poolPattern.MatchString(b.Pool):
					f.Add("pool", "must be a pool name (an RFC 1123 label)")
				}
				if b.Revision < 0 {
					f.Add("revision", "must be a revision number, or 0 for the latest")
				}
				if b.Machine != "" {
					b.Machine = strings.ToLower(b.Machine)
					if !uuidPattern.MatchString(b.Machine) {
						f.Add("machine", "must be a machine's UUID")
					}
				}
				if b.After != "" && !idPattern.MatchString(b.After) {
					f.Add("after", "must be a rollout id")
				}
				return rolloutapi.StartRequest{Org: r.PathValue("org"), Pool: b.Pool, Revision: b.Revision, Machine: b.Machine, After: b.After,
					RequestedBy: principalOf(ctx).Actor()}, f.Err()
			},
			Endpoint: func(ctx context.Context, req any) (any, error) {
				out, err := ro.Start(ctx, req.(rolloutapi.StartRequest))
				if err == nil {
					h.writes.note(ctx, marksRollout, out.Version)
				}
				return out, err
			}},
		{Method: "GET", Path: one, Min: V, Summary: "Get a rollout (status, progress, machines and checks; its log is at /operations/{id}/log), now or ?at= a past time or sequence",
			Response: rolloutapi.Rollout{}, Status: 200, Query: []string{"at"},
			Decode: func(_ context.Context, r *http.Request) (any, error) { return get(r) },
			Endpoint: func(ctx context.Context, req any) (any, error) {
				r := req.(rolloutapi.GetRequest)
				r.MinVersion = h.writes.last(ctx, marksRollout)
				return ro.Get(ctx, r)
			}},
		control("pause", "Pause a rollout: no new machine begins; machines already begun finish", ro.Pause),
		control("resume", "Resume a paused rollout", ro.Resume),
		control("abort", "Abort a rollout: machines not begun are left alone, begun ones wind down", ro.Abort),
		control("retry", "Retry a failed rollout from where it stopped", ro.Retry),

		{Method: "GET", Path: operations, Min: V, Summary: "List operations (rollouts, maintenance, unassignments, deletions), newest first (filters: pool, status, kind; cursor pagination)",
			Response: rolloutapi.OperationList{}, Status: 200, Query: []string{"pool", "status", "kind", "cursor", "limit"}, Limit: rolloutPage,
			Decode: func(_ context.Context, r *http.Request) (any, error) { return listRequest(r, true) },
			Endpoint: func(ctx context.Context, req any) (any, error) {
				return ro.ListOperations(ctx, req.(rolloutapi.ListRequest))
			}},
		{Method: "GET", Path: operation, Min: V, Summary: "Get an operation, now or ?at= a past time or sequence",
			Response: rolloutapi.Operation{}, Status: 200, Query: []string{"at"},
			Decode: func(_ context.Context, r *http.Request) (any, error) { return get(r) },
			Endpoint: func(ctx context.Context, req any) (any, error) {
				r := req.(rolloutapi.GetRequest)
				r.MinVersion = h.writes.last(ctx, marksRollout)
				return ro.GetOperation(ctx, r)
			}},
		h.logRoute(ro, operation+"/log"),
	}
}

// readOptionalJSON is readJSON for a body that may be absent.
func readOptionalJSON(r *http.Request, limit int64, v any) error {
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	err := readJSON(r, limit, v)
	if errors.Is(err, errEmptyBody) {
		return nil // a body of white space
	}
	return err
}

// lastEventID reads Last-Event-ID: the index of the last entry the client
// received.
func lastEventID(r *http.Request) (int, bool, error) {
	s := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if s == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, errs.Invalid("Last-Event-ID", "must be the id of an event of this stream")
	}
	return n, true, nil
}
