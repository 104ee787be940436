package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxForm bounds a form's body; the largest is a pool with its network
// profile or a cluster with its kubeconfig.
const maxForm = 1 << 20

// handlerFunc is a console page: the request, its session and the view
// with the session and organization filled in.
type handlerFunc func(w http.ResponseWriter, r *http.Request, v view)

func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /ui/static/", staticHandler())
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	m.HandleFunc("GET /ui/{$}", c.authed(c.home, false))
	m.HandleFunc("GET /ui/sign-in", c.signInForm)
	m.HandleFunc("POST /ui/sign-in", c.signIn)
	m.HandleFunc("POST /ui/sign-out", c.authed(c.signOut, false))
	m.HandleFunc("GET /ui/orgs", c.authed(c.orgList, false))
	m.HandleFunc("POST /ui/orgs", c.authed(c.orgCreate, false))

	const o = "/ui/orgs/{org}"
	page := func(pattern string, h handlerFunc) { m.HandleFunc(pattern, c.authed(h, true)) }
	page("GET "+o+"/{$}", func(w http.ResponseWriter, r *http.Request, v view) {
		http.Redirect(w, r, "/ui/orgs/"+url.PathEscape(v.Org)+"/machines", http.StatusFound)
	})
	page("GET "+o+"/machines", c.machineList)
	page("GET "+o+"/machines/new", c.machineNew)
	page("POST "+o+"/machines", c.machineRegister)
	page("GET "+o+"/machines/{uuid}", c.machineDetail)
	page("GET "+o+"/machines/{uuid}/confirm", c.machineConfirm)
	page("POST "+o+"/machines/{uuid}/actions/{action}", c.machineAction)
	page("POST "+o+"/machines/{uuid}/revisions/{n}/apply", c.machineApplyRevision)

	page("GET "+o+"/pools", c.poolList)
	page("GET "+o+"/pools/new", c.poolNew)
	page("POST "+o+"/pools", c.poolCreate)
	page("GET "+o+"/pools/{pool}", c.poolDetail)
	page("POST "+o+"/pools/{pool}", c.poolSave)
	page("GET "+o+"/pools/{pool}/revisions/{n}", c.revisionDetail)
	page("GET "+o+"/pools/{pool}/revisions/{n}/confirm", c.revisionConfirm)
	page("POST "+o+"/pools/{pool}/revisions/{n}/apply", c.revisionApply)
	page("GET "+o+"/clusters", c.clusterList)
	page("POST "+o+"/clusters", c.clusterCreate)

	page("GET "+o+"/rollouts", c.rolloutList)
	page("GET "+o+"/rollouts/{id}", c.rolloutDetail)
	page("GET "+o+"/rollouts/{id}/confirm", c.rolloutConfirm)
	page("POST "+o+"/rollouts/{id}/{verb}", c.rolloutControl)
	page("GET "+o+"/operations", c.operationList)
	page("GET "+o+"/operations/{id}", c.operationDetail)
	page("GET "+o+"/operations/{id}/log", c.operationLog)

	page("GET "+o+"/audit", c.audit)
	page("GET "+o+"/time-travel", c.timeTravel)

	page("GET "+o+"/settings", c.settings)
	page("POST "+o+"/tokens", c.tokenCreate)
	page("POST "+o+"/tokens/{id}/revoke", c.tokenRevoke)
	page("POST "+o+"/enrollment-tokens", c.enrollmentCreate)
	page("POST "+o+"/enrollment-tokens/{id}/revoke", c.enrollmentRevoke)

	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.showTrouble(w, r, view{}, trouble{Status: http.StatusNotFound, Headline: "No such page",
			Happened: "The console has no page at " + r.URL.Path + ".", ToDo: "Start again from the start page."})
	})
	return m
}

// authed loads the session, refuses a write without its CSRF token or from
// another origin, and, for pages of an organization, asks the API whether
// the session may see it (an organization it may not see is a 404, as in
// the API).
func (c *Console) authed(h handlerFunc, inOrg bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, err := c.sessionOf(r)
		if err != nil {
			if !errors.Is(err, errNoSession) {
				c.fail(w, r, view{}, "reading your session", err)
				return
			}
			clearSessionCookie(w, r)
			if r.Method != http.MethodGet {
				c.showTrouble(w, r, view{}, trouble{Status: http.StatusForbidden, Headline: "You are not signed in",
					Happened: "This form was sent without a live session (it expired, or you signed out), so nothing was done.",
					ToDo:     "Sign in again, then repeat what you were doing.", BackURL: "/ui/sign-in", BackLabel: "Sign in"})
				return
			}
			next := r.URL.RequestURI()
			http.Redirect(w, r, "/ui/sign-in?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		v := view{S: sess}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				c.showTrouble(w, r, v, trouble{Status: http.StatusBadRequest, Headline: "The form could not be read",
					Happened: "The browser sent a form the console could not read: " + err.Error() + ".", ToDo: "Go back and send it again."})
				return
			}
			if !sameOrigin(r) || !checkCSRF(r, sess.CSRF) {
				c.showTrouble(w, r, v, trouble{Status: http.StatusForbidden, Headline: "This form was refused",
					Happened: "The form did not carry this session's security token (CSRF), or came from another site, so nothing was done. " +
						"This happens when a form was opened before you signed in again, or when another page tries to act on your behalf.",
					ToDo: "Go back, reload the page, and send the form again."})
				return
			}
		}
		if inOrg {
			v.Org = r.PathValue("org")
			var org struct {
				DisplayName string `json:"display_name"`
			}
			if _, err := c.do(r.Context(), sess.token, call{method: "GET", path: orgPath(v.Org)}, &org); err != nil {
				c.fail(w, r, v, "opening organization "+quoteOrg(v.Org), err)
				return
			}
			v.OrgName = org.DisplayName
		}
		h(w, r, v)
	}
}

func (c *Console) sessionOf(r *http.Request) (*session, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil, errNoSession
	}
	return c.sessions.get(r.Context(), ck.Value, time.Now())
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, id string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/ui", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/ui", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// home sends a user to their organization's machines, or the bootstrap
// admin to the list of organizations.
func (c *Console) home(w http.ResponseWriter, r *http.Request, v view) {
	if v.S.Org != "" {
		http.Redirect(w, r, "/ui/orgs/"+url.PathEscape(v.S.Org)+"/machines", http.StatusFound)
		return
	}
	http.Redirect(w, r, "/ui/orgs", http.StatusFound)
}

// orgURL is the console URL of a page of v's organization.
func (v view) orgURL(segs ...string) string {
	var b strings.Builder
	b.WriteString("/ui/orgs/")
	b.WriteString(url.PathEscape(v.Org))
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}
