package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-fleet/anvil/services/gateway/ports"
)

// aggregateTypes are the kinds of things the log has events of.
var aggregateTypes = []string{"machine", "pool", "cluster", "rollout", "operation", "org"}

type auditEvent struct {
	ports.Event
	Link   string // the aggregate's page, if the console has one
	AsOf   string // that page as of this event
	Detail string
}

type auditData struct {
	Events    []auditEvent
	Next      string
	Filters   url.Values
	Query     string
	AggTypes  []string
	AggType   string
	AggID     string
	Defaulted bool
	// Time travel form
	Kinds []string
}

// objectURL is the console page of an aggregate, or "" when it has none.
func (v view) objectURL(typ, id string) string {
	switch typ {
	case "machine":
		return v.orgURL("machines", id)
	case "pool":
		return v.orgURL("pools", id)
	case "rollout":
		return v.orgURL("rollouts", id)
	case "operation":
		return v.orgURL("operations", id)
	case "cluster":
		return v.orgURL("clusters")
	}
	return ""
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request, v view) {
	q := r.URL.Query()
	d := auditData{AggTypes: aggregateTypes, Kinds: []string{"machine", "pool", "rollout", "operation"}, Filters: url.Values{}}
	d.AggType, d.AggID = q.Get("agg_type"), strings.TrimSpace(q.Get("agg_id"))
	if a := q.Get("aggregate"); a != "" && d.AggType == "" {
		d.AggType, d.AggID, _ = strings.Cut(a, "/")
	}
	api := url.Values{"limit": {"100"}}
	if d.AggType != "" {
		agg := d.AggType
		if d.AggID != "" {
			agg += "/" + d.AggID
		}
		api.Set("aggregate", agg)
		d.Filters.Set("agg_type", d.AggType)
		if d.AggID != "" {
			d.Filters.Set("agg_id", d.AggID)
		}
	}
	for _, k := range []string{"type", "actor", "since", "until"} {
		val := strings.TrimSpace(q.Get(k))
		if k == "since" || k == "until" {
			val = atParam(val)
		}
		if val != "" {
			api.Set(k, val)
			d.Filters.Set(k, val)
		}
	}
	// With no filter at all, the last day: the log's start may be years back.
	if len(q) == 0 {
		since := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Minute).Format(time.RFC3339)
		api.Set("since", since)
		d.Filters.Set("since", since)
		d.Defaulted = true
	}
	d.Query = d.Filters.Encode()
	if after := q.Get("after"); after != "" {
		api.Set("after", after)
	}
	var page ports.EventPage
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "events"), query: api}, &page); err != nil {
		if statusOf(err) != http.StatusUnprocessableEntity {
			c.fail(w, r, v, "reading the audit log", err)
			return
		}
		v.Flash = "The filter was refused: " + fieldText(err)
	}
	for _, e := range page.Items {
		typ, id, _ := strings.Cut(e.Aggregate, "/")
		ae := auditEvent{Event: e, Link: v.objectURL(typ, id)}
		if ae.Link != "" && typ != "cluster" {
			ae.AsOf = ae.Link + "?at=" + strconv.FormatUint(e.Sequence, 10)
		}
		ae.Detail = indentJSON(e.Payload)
		d.Events = append(d.Events, ae)
	}
	d.Next = page.Next
	v.Title, v.Section, v.Data = "Audit log", "audit", d
	c.render(w, r, http.StatusOK, "audit", v)
}

// timeTravel opens a machine, pool, rollout or operation as it was at an
// instant (the API rebuilds it from the log).
func (c *Console) timeTravel(w http.ResponseWriter, r *http.Request, v view) {
	q := r.URL.Query()
	kind, id, at := q.Get("kind"), strings.TrimSpace(q.Get("id")), atParam(q.Get("at"))
	target := v.objectURL(kind, id)
	if target == "" || id == "" || at == "" || kind == "cluster" {
		v.Section = "audit"
		c.showTrouble(w, r, v, trouble{Status: http.StatusUnprocessableEntity, Headline: "Time travel needs three things",
			Happened: "Pick what to look at (a machine, pool, rollout or operation), its UUID, name or id, and an instant.",
			ToDo:     "The instant is a UTC time (2026-11-02T09:00:00Z, or the date picker's value) or an event's sequence number from the audit log.",
			BackURL:  v.orgURL("audit"), BackLabel: "Back to the audit log"})
		return
	}
	http.Redirect(w, r, target+"?at="+url.QueryEscape(at), http.StatusSeeOther)
}
