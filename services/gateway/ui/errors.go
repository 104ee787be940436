package ui

import (
	"errors"
	"net/http"
)

// trouble is an error page: what happened and what to do about it.
type trouble struct {
	Status    int
	Headline  string
	Happened  string
	ToDo      string
	Detail    string // the API's own words
	Fields    []fieldError
	BackURL   string
	BackLabel string
}

// fail renders an error page for err, which happened while doing what
// (a phrase such as "registering the machine"). A 401 from the API means
// the session's token stopped working: the session ends and the user signs
// in again.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v view, what string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		c.log.ErrorContext(r.Context(), "console: request failed", "path", r.URL.Path, "what", what, "err", err)
		c.showTrouble(w, r, v, trouble{Status: http.StatusInternalServerError,
			Headline: "Something went wrong while " + what,
			Happened: "The console could not finish: " + err.Error() + ".",
			ToDo:     "Try again. If it keeps happening, the gateway's log has the details (search for the path " + r.URL.Path + ")."})
		return
	}
	if ae.Status == http.StatusUnauthorized && v.S != nil {
		_ = c.sessions.end(r.Context(), v.S)
		clearSessionCookie(w, r)
		flash(w, r, "The API no longer accepts your token (it was revoked or has expired), so you were signed out. Sign in again with a valid token.")
		http.Redirect(w, r, "/ui/sign-in", http.StatusSeeOther)
		return
	}
	c.showTrouble(w, r, v, describe(ae, what, v.Org))
}

// describe turns an API problem into words for a person at 3 a.m.
func describe(ae *apiError, what, org string) trouble {
	t := trouble{Status: ae.Status, Detail: ae.Detail, Fields: ae.Errors}
	switch ae.Status {
	case http.StatusNotFound:
		t.Headline = "Not found"
		t.Happened = "While " + what + ", the API found nothing by that name in organization " + quoteOrg(org) +
			". It may have been deleted, the link may be mistyped, or it may belong to another organization (the API answers the same in every case)."
		t.ToDo = "Go back to the list and pick it from there; check the UUID or name in the address bar."
	case http.StatusForbidden:
		t.Headline = "Your role may not do this"
		t.Happened = "While " + what + ", the API refused: your token's role is not enough."
		t.ToDo = "Ask an admin of " + quoteOrg(org) + " for a token with the role named below, or ask them to do it."
	case http.StatusConflict:
		t.Headline = "Not possible right now"
		t.Happened = "While " + what + ", the API said the current state forbids it."
		t.ToDo = "Read the API's reason above. Usually an operation is still running: open Operations, wait for it (or abort it), then try again."
	case http.StatusPreconditionFailed:
		t.Headline = "Someone changed it first"
		t.Happened = "While " + what + ", the API found that it changed since you opened the page, so nothing was done."
		t.ToDo = "Go back, reload to see the current state, and try again if it still makes sense."
	case http.StatusUnprocessableEntity:
		t.Headline = "The API refused the input"
		t.Happened = "While " + what + ", the API found invalid values."
		t.ToDo = "Fix the fields listed below and send the form again."
	case http.StatusServiceUnavailable:
		t.Headline = "A service did not answer"
		t.Happened = "While " + what + ", a service behind the gateway did not answer in time. Nothing may have changed, or the change may still be applied."
		t.ToDo = "Wait a few seconds and reload. If it persists, check that every service is running (GET /readyz on each) and look at their logs."
	case http.StatusRequestEntityTooLarge:
		t.Headline = "Too large"
		t.Happened = "While " + what + ", the request was larger than the gateway accepts (--body-limit)."
		t.ToDo = "Send less, or ask the platform team to raise ANVIL_GATEWAY_BODY_LIMIT."
	default:
		t.Headline = "The API answered " + http.StatusText(ae.Status)
		t.Happened = "While " + what + ", the API answered with status " + http.StatusText(ae.Status) + "."
		t.ToDo = "Try again. If it keeps happening, the gateway's log has the details."
	}
	return t
}

func quoteOrg(org string) string {
	if org == "" {
		return "(none)"
	}
	return "“" + org + "”"
}

func (c *Console) showTrouble(w http.ResponseWriter, r *http.Request, v view, t trouble) {
	if t.BackURL == "" {
		t.BackURL, t.BackLabel = "/ui/", "Go to the start page"
		if v.Org != "" && v.Section != "" {
			t.BackURL, t.BackLabel = "/ui/orgs/"+v.Org+"/"+v.Section, "Back to "+v.Section
		}
	}
	v.Title = t.Headline
	v.Data = t
	c.render(w, r, t.Status, "error", v)
}
