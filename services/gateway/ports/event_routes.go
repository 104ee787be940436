package ports

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
)

// Event is one event of the audit log.
type Event struct {
	Sequence      uint64          `json:"sequence"`
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Aggregate     string          `json:"aggregate"` // <type>/<id>
	Time          time.Time       `json:"time"`
	Actor         string          `json:"actor,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	CausationID   string          `json:"causation_id,omitempty"`
	Payload       json.RawMessage `json:"payload"`
}

// EventPage is one page of events, oldest first; Next is the cursor of the
// following page (pass it as ?cursor=; ?after= is its deprecated alias),
// absent at the end.
type EventPage struct {
	Items []Event `json:"items"`
	Next  string  `json:"next,omitempty"`
}

type eventQuery struct {
	filter   events.Filter
	from, to events.Position
	actor    string
	limit    int
}

var errPageFull = errors.New("page full")

func (h *handler) eventRoutes() []route {
	return []route{{
		Method: "GET", Path: "/api/v1/orgs/{org}/events", Min: domain.RoleViewer,
		Summary:  "Audit: the organization's events, filtered by aggregate (machine/<uuid>), type, actor and time, oldest first",
		Response: EventPage{}, Status: 200, Query: []string{"aggregate", "type", "actor", "since", "until", "cursor", "after", "limit"}, Limit: listPage,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			q := r.URL.Query()
			var f errs.Fields
			eq := eventQuery{filter: events.Filter{Org: r.PathValue("org")}, actor: q.Get("actor")}
			if a := q.Get("aggregate"); a != "" {
				typ, id, _ := strings.Cut(a, "/")
				eq.filter.AggregateType, eq.filter.AggregateID = typ, id
				if err := (events.AggregateRef{Org: "x", Type: typ, ID: orStar(id)}).Validate(); err != nil {
					f.Add("aggregate", "must be <type> or <type>/<id>, such as machine/4c4c4544-…")
				}
			}
			if t := q.Get("type"); t != "" {
				eq.filter.EventTypes = strings.Split(t, ",")
			}
			if s := q.Get("since"); s != "" {
				t, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					f.Add("since", "must be an RFC 3339 time")
				}
				eq.from = events.AtTime(t)
			}
			if s := q.Get("until"); s != "" {
				t, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					f.Add("until", "must be an RFC 3339 time")
				}
				eq.to = events.AtTime(t)
			}
			// ?after= is the cursor's name before the one list envelope;
			// it is still accepted.
			param, cursor := "cursor", q.Get("cursor")
			if after := q.Get("after"); after != "" {
				switch {
				case cursor == "":
					param, cursor = "after", after
				case cursor != after:
					f.Add("after", "is the deprecated name of cursor; give one of them")
				}
			}
			if cursor != "" {
				n, err := strconv.ParseUint(cursor, 10, 64)
				if err != nil {
					f.Add(param, "must be the next of a previous page")
				}
				eq.from.Seq = n + 1
			}
			limit, err := listPage.read(r)
			f.Merge("", err)
			eq.limit = limit
			return eq, f.Err()
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			eq := req.(eventQuery)
			page := EventPage{Items: []Event{}}
			err := h.Store.Replay(ctx, eq.filter, eq.from, eq.to, func(e *events.Envelope) error {
				if eq.actor != "" && !actorMatches(e.Actor, eq.actor) {
					return nil
				}
				if len(page.Items) == eq.limit {
					page.Next = strconv.FormatUint(page.Items[len(page.Items)-1].Sequence, 10)
					return errPageFull
				}
				page.Items = append(page.Items, Event{Sequence: e.Sequence, ID: e.ID, Type: e.Type, SchemaVersion: e.SchemaVersion,
					Aggregate: e.AggregateType + "/" + e.AggregateID, Time: e.Time, Actor: e.Actor,
					CorrelationID: e.CorrelationID, CausationID: e.CausationID, Payload: e.Payload})
				return nil
			})
			if err != nil && !errors.Is(err, errPageFull) {
				return nil, err
			}
			return page, nil
		},
	}}
}

func orStar(id string) string {
	if id == "" {
		return "x"
	}
	return id
}

// actorMatches says whether an event's actor is what a filter asks for:
// the exact value ("token:t1 (ci)"), a kind ("token", "service",
// "machine", "platform"), or a kind and a name without the token's
// display name ("token:t1", "service:rollout", "machine:<uuid>").
func actorMatches(actor, want string) bool {
	switch {
	case actor == want:
		return true
	case !strings.Contains(want, ":"):
		kind, _, _ := strings.Cut(actor, ":")
		return kind == want
	}
	id, _, _ := strings.Cut(actor, " ")
	return id == want
}
