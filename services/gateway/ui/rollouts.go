package ui

import (
	"net/http"
	"net/url"
	"strconv"

	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

var (
	rolloutStatuses   = []string{"active", "pending", "running", "paused", "succeeded", "failed", "aborted"}
	operationKinds    = []string{"rollout", "machine", "maintenance_enter", "maintenance_exit", "deletion", "deletion_abort", "deletion_finish", "unassign"}
	operationStatuses = []string{"pending", "running", "paused", "succeeded", "failed", "aborted"}
)

type listData struct {
	Rollouts   []rolloutapi.Rollout
	Operations []rolloutapi.Operation
	Next       string
	Filters    url.Values
	Query      string
	Statuses   []string
	Kinds      []string
}

// listQuery copies the named filters from the page's query to the API's.
func listQuery(r *http.Request, names ...string) (api, filters url.Values) {
	api, filters = url.Values{"limit": {"50"}}, url.Values{}
	for _, n := range names {
		if v := r.URL.Query().Get(n); v != "" {
			api.Set(n, v)
			filters.Set(n, v)
		}
	}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		api.Set("cursor", cur)
	}
	return api, filters
}

func (c *Console) rolloutList(w http.ResponseWriter, r *http.Request, v view) {
	api, filters := listQuery(r, "pool", "status")
	var list rolloutapi.RolloutList
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "rollouts"), query: api}, &list); err != nil {
		if statusOf(err) != http.StatusUnprocessableEntity {
			c.fail(w, r, v, "listing rollouts", err)
			return
		}
		v.Flash = "The filter was refused: " + fieldText(err)
	}
	d := listData{Rollouts: list.Items, Next: list.Next, Filters: filters, Query: filters.Encode(), Statuses: rolloutStatuses}
	if r.Header.Get("X-Console-Fragment") == "rows" {
		v.Data, v.Fragment = d, "rollout-rows"
		c.render(w, r, http.StatusOK, "rollouts", v)
		return
	}
	v.Title, v.Section, v.Data = "Rollouts", "rollouts", d
	c.render(w, r, http.StatusOK, "rollouts", v)
}

type rolloutData struct {
	R       rolloutapi.Rollout
	LogNext int // the index of the first entry the page does not show
	At      string
	Final   bool
	Confirm string // the control being confirmed
	Explain string
}

func (c *Console) getRollout(w http.ResponseWriter, r *http.Request, v view, at string) (rolloutapi.Rollout, bool) {
	id := r.PathValue("id")
	q := url.Values{}
	if at != "" {
		q.Set("at", at)
	}
	var ro rolloutapi.Rollout
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "rollouts", id), query: q}, &ro); err != nil {
		v.Section = "rollouts"
		c.fail(w, r, v, "opening rollout "+id, err)
		return ro, false
	}
	return ro, true
}

func final(status string) bool { return status == "succeeded" || status == "aborted" }

func (c *Console) rolloutDetail(w http.ResponseWriter, r *http.Request, v view) {
	at := atParam(r.URL.Query().Get("at"))
	ro, ok := c.getRollout(w, r, v, at)
	if !ok {
		return
	}
	d := rolloutData{R: ro, At: at, Final: final(string(ro.Status)), LogNext: len(ro.Log)}
	if r.Header.Get("X-Console-Fragment") == "rollout" {
		v.Data, v.Fragment = d, "rollout-live"
		c.render(w, r, http.StatusOK, "rollout", v)
		return
	}
	if at == "" && len(ro.Log) == 0 {
		// A rollout's answer leaves its log out; the log route has it.
		var page rolloutapi.LogPage
		if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "operations", ro.ID, "log"), query: url.Values{"limit": {"1000"}}}, &page); err == nil {
			d.R.Log, d.LogNext = page.Entries, page.Next
		}
	}
	v.Title, v.Section, v.Data = "Rollout "+ro.ID, "rollouts", d
	c.render(w, r, http.StatusOK, "rollout", v)
}

var controlExplain = map[string]string{
	"pause":  "No new machine begins; machines already begun finish their step. Resume it later.",
	"resume": "Machines begin again, as many at a time as the pool's max_unavailable allows.",
	"abort":  "Machines not begun are left alone; machines already begun wind down to a known state (each one is reported). An aborted rollout cannot be resumed; apply the revision again to start over.",
	"retry":  "The failed rollout continues from where it stopped: failed machines are tried again.",
}

func (c *Console) rolloutConfirm(w http.ResponseWriter, r *http.Request, v view) {
	ro, ok := c.getRollout(w, r, v, "")
	if !ok {
		return
	}
	verb := r.URL.Query().Get("verb")
	explain, known := controlExplain[verb]
	if !known {
		v.Section = "rollouts"
		c.showTrouble(w, r, v, trouble{Status: http.StatusBadRequest, Headline: "Unknown control",
			Happened: "The console knows no rollout control " + strconv.Quote(verb) + ".", ToDo: "Go back to the rollout and use its buttons."})
		return
	}
	v.Title, v.Section, v.Data = verb+" rollout "+ro.ID+"?", "rollouts", rolloutData{R: ro, Final: final(string(ro.Status)), Confirm: verb, Explain: explain}
	c.render(w, r, http.StatusOK, "rollout", v)
}

func (c *Console) rolloutControl(w http.ResponseWriter, r *http.Request, v view) {
	v.Section = "rollouts"
	id, verb := r.PathValue("id"), r.PathValue("verb")
	if _, ok := controlExplain[verb]; !ok {
		c.showTrouble(w, r, v, trouble{Status: http.StatusNotFound, Headline: "Unknown control",
			Happened: "The console knows no rollout control " + strconv.Quote(verb) + ".", ToDo: "Go back to the rollout and use its buttons."})
		return
	}
	// No If-Match: a running rollout's version moves with every step, and
	// the rollout service refuses a control its status forbids.
	var body any
	if reason := r.PostFormValue("reason"); reason != "" {
		body = map[string]string{"reason": reason}
	}
	var ro rolloutapi.Rollout
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, "rollouts", id, verb), body: body,
		idempotency: r.PostFormValue("idem")}, &ro); err != nil {
		c.fail(w, r, v, verb+" rollout "+id, err)
		return
	}
	flash(w, r, "Rollout "+id+": "+verb+" accepted; it is "+string(ro.Status)+" now.")
	http.Redirect(w, r, v.orgURL("rollouts", id), http.StatusSeeOther)
}

func (c *Console) operationList(w http.ResponseWriter, r *http.Request, v view) {
	api, filters := listQuery(r, "pool", "status", "kind")
	var list rolloutapi.OperationList
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "operations"), query: api}, &list); err != nil {
		if statusOf(err) != http.StatusUnprocessableEntity {
			c.fail(w, r, v, "listing operations", err)
			return
		}
		v.Flash = "The filter was refused: " + fieldText(err)
	}
	d := listData{Operations: list.Items, Next: list.Next, Filters: filters, Query: filters.Encode(), Statuses: operationStatuses, Kinds: operationKinds}
	v.Title, v.Section, v.Data = "Operations", "operations", d
	c.render(w, r, http.StatusOK, "operations", v)
}

type operationData struct {
	Op    rolloutapi.Operation
	At    string
	Final bool
}

func (c *Console) operationDetail(w http.ResponseWriter, r *http.Request, v view) {
	id := r.PathValue("id")
	at := atParam(r.URL.Query().Get("at"))
	q := url.Values{}
	if at != "" {
		q.Set("at", at)
	}
	var op rolloutapi.Operation
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "operations", id), query: q}, &op); err != nil {
		v.Section = "operations"
		c.fail(w, r, v, "opening operation "+id, err)
		return
	}
	if op.Kind == rolloutapi.KindRollout {
		target := v.orgURL("rollouts", id)
		if at != "" {
			target += "?at=" + url.QueryEscape(at)
		}
		http.Redirect(w, r, target, http.StatusFound)
		return
	}
	if op.Log == nil {
		var page rolloutapi.LogPage
		if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org, "operations", id, "log"), query: url.Values{"limit": {"1000"}}}, &page); err == nil {
			op.Log = page.Entries
		}
	}
	v.Title, v.Section, v.Data = "Operation "+op.ID, "operations", operationData{Op: op, At: at, Final: final(op.Status)}
	c.render(w, r, http.StatusOK, "operation", v)
}

// operationLog relays the API's live log (Server-Sent Events) to the
// browser: EventSource cannot send an Authorization header, so the console
// makes the request with the session's token and streams the API's answer
// through as it comes.
func (c *Console) operationLog(w http.ResponseWriter, r *http.Request, v view) {
	u := orgPath(v.Org, "operations", r.PathValue("id"), "log")
	if after := r.URL.Query().Get("after"); after != "" {
		u += "?after=" + url.QueryEscape(after)
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, http.NoBody)
	if err != nil {
		c.fail(w, r, v, "opening the live log", err)
		return
	}
	req.RemoteAddr = "console"
	req.Header.Set("Authorization", "Bearer "+v.S.token)
	req.Header.Set("Accept", "text/event-stream")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	c.api.ServeHTTP(w, req)
}
