package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// signInCookie carries the sign-in form's own CSRF token (there is no
// session yet): a page of another site cannot sign a browser in with the
// attacker's token.
const signInCookie = "anvil_signin"

type signInData struct {
	CSRF  string
	Next  string
	Error string
}

func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	if sess, err := c.sessionOf(r); err == nil && sess != nil && r.URL.Query().Get("next") == "" {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	c.renderSignIn(w, r, http.StatusOK, "")
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	tok := base64.RawURLEncoding.EncodeToString(raw)
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: tok, Path: "/ui/sign-in", MaxAge: 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	c.render(w, r, status, "signin", view{Title: "Sign in", Data: signInData{CSRF: tok, Next: safeNext(r.FormValue("next")), Error: msg}})
}

// safeNext keeps a post-sign-in destination only when it is a console path.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "//") && !strings.Contains(next, "\\") {
		return next
	}
	return ""
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.renderSignIn(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	ck, err := r.Cookie(signInCookie)
	if err != nil || ck.Value == "" || !sameOrigin(r) ||
		subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		c.renderSignIn(w, r, http.StatusForbidden,
			"This sign-in form was refused: it did not carry its security token (it may have been open for over an hour, or sent from another site). Try again with this fresh form.")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		c.renderSignIn(w, r, http.StatusUnprocessableEntity, "Paste an API token: an admin of your organization issues them on its Organization page, or with anvilctl.")
		return
	}
	org, role, err := c.identify(r.Context(), token)
	if err != nil {
		c.renderSignIn(w, r, statusOf(err), signInTrouble(err))
		return
	}
	id, sess, err := c.sessions.create(r.Context(), token, org, role, time.Now())
	if err != nil {
		c.renderSignIn(w, r, http.StatusServiceUnavailable,
			"Signing in failed because the session could not be stored ("+err.Error()+"). The gateway's JetStream may be unavailable; try again in a minute.")
		return
	}
	setSessionCookie(w, r, id, sess.ExpiresAt)
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Path: "/ui/sign-in", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	next := safeNext(r.PostFormValue("next"))
	if next == "" {
		next = "/ui/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func signInTrouble(err error) string {
	switch statusOf(err) {
	case http.StatusUnauthorized:
		return "The API does not accept this token: it is mistyped, revoked or expired. Copy it again, or ask an admin of your organization for a new one."
	case http.StatusServiceUnavailable:
		return "The gateway could not check the token because the registry service did not answer. Wait a minute and try again; if it persists, check the registry's health."
	}
	return "Signing in failed: " + err.Error() + ". Try again; if it persists, the gateway's log has the details."
}

// probeBody carries a field no route knows: the API refuses it as invalid
// (422) only after the token passed the route's role check, and refuses a
// token without the role with 403, so a probe learns the role and changes
// nothing. The API has no "who am I" route.
var probeBody = map[string]bool{"console_role_probe": true}

// identify asks the API which organization the token belongs to and which
// role it has, for the buttons the console shows.
func (c *Console) identify(ctx context.Context, token string) (org, role string, err error) {
	var orgs struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if _, err := c.do(ctx, token, call{method: "GET", path: "/api/v1/orgs"}, &orgs); err != nil {
		return "", "", err
	}
	probe := func(path string) (bool, error) {
		_, err := c.do(ctx, token, call{method: "POST", path: path, body: probeBody}, nil)
		switch statusOf(err) {
		case http.StatusUnprocessableEntity:
			return true, nil
		case http.StatusForbidden, http.StatusNotFound:
			return false, nil
		}
		if err == nil {
			return false, fmt.Errorf("the role probe %s was accepted; the console expected a refusal", path)
		}
		return false, err
	}
	platform, err := probe("/api/v1/orgs")
	if err != nil || platform {
		return "", "platform", err
	}
	if len(orgs.Items) != 1 {
		return "", "", fmt.Errorf("the token sees %d organizations; an organization's token sees exactly one", len(orgs.Items))
	}
	org = orgs.Items[0].ID
	for _, p := range []struct{ path, role string }{{orgPath(org, "tokens"), "admin"}, {orgPath(org, "rollouts"), "operator"}} {
		ok, err := probe(p.path)
		if err != nil {
			return "", "", err
		}
		if ok {
			return org, p.role, nil
		}
	}
	return org, "viewer", nil
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, v view) {
	if err := c.sessions.end(r.Context(), v.S); err != nil {
		c.fail(w, r, v, "signing out", err)
		return
	}
	clearSessionCookie(w, r)
	flash(w, r, "You are signed out. The session is gone from the server; its cookie opens nothing any more.")
	http.Redirect(w, r, "/ui/sign-in", http.StatusSeeOther)
}

type orgItem struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	Version     uint64 `json:"version"`
}

type orgListData struct {
	Items  []orgItem
	Errors map[string]string
	Form   url.Values
}

func (c *Console) orgList(w http.ResponseWriter, r *http.Request, v view) {
	orgs, err := listAll[orgItem](r.Context(), c, v.S.token, "/api/v1/orgs")
	if err != nil {
		c.fail(w, r, v, "listing organizations", err)
		return
	}
	v.Title, v.Data = "Organizations", orgListData{Items: orgs}
	c.render(w, r, http.StatusOK, "orgs", v)
}

func (c *Console) orgCreate(w http.ResponseWriter, r *http.Request, v view) {
	body := map[string]string{"id": strings.TrimSpace(r.PostFormValue("id")), "display_name": strings.TrimSpace(r.PostFormValue("display_name"))}
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: "/api/v1/orgs", body: body, idempotency: r.PostFormValue("idem")}, nil); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			orgs, _ := listAll[orgItem](r.Context(), c, v.S.token, "/api/v1/orgs")
			v.Title, v.Data = "Organizations", orgListData{Items: orgs, Errors: fieldMap(err), Form: r.PostForm}
			c.render(w, r, http.StatusUnprocessableEntity, "orgs", v)
			return
		}
		c.fail(w, r, v, "creating the organization", err)
		return
	}
	flash(w, r, "Organization "+body["id"]+" created. Issue its first admin token on its Organization page.")
	http.Redirect(w, r, "/ui/orgs/"+url.PathEscape(body["id"])+"/settings", http.StatusSeeOther)
}

// fieldMap is a validation error's fields by name; errors the form has no
// field for go under "".
func fieldMap(err error) map[string]string {
	out := map[string]string{}
	if ae, ok := err.(*apiError); ok {
		for _, f := range ae.Errors {
			if out[f.Field] != "" {
				out[f.Field] += "; "
			}
			out[f.Field] += f.Reason
		}
		if len(ae.Errors) == 0 {
			out[""] = ae.Detail
		}
	}
	return out
}
