package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	regapi "github.com/anvil-fleet/anvil/services/registry/api"
)

type settingsData struct {
	Org         orgItem
	Tokens      []regapi.TokenInfo
	Enrollment  []regapi.TokenInfo
	BootURL     string
	ChainURL    string // with a new enrollment token, shown once
	NewToken    string // a new API token, shown once
	NewKind     string
	NewName     string
	TokenErrors map[string]string
	EnrollErrs  map[string]string
	Form        url.Values
}

// chainURL is the iPXE chain URL machines boot from with an enrollment token.
func (c *Console) chainURL(token string) string {
	base := c.bootURL
	if base == "" {
		base = "http://<boot service>:8081"
	}
	return base + "/boot.ipxe?token=" + url.QueryEscape(token)
}

func (c *Console) settings(w http.ResponseWriter, r *http.Request, v view) {
	c.renderSettings(w, r, v, http.StatusOK, settingsData{})
}

func (c *Console) renderSettings(w http.ResponseWriter, r *http.Request, v view, status int, d settingsData) {
	if _, err := c.do(r.Context(), v.S.token, call{method: "GET", path: orgPath(v.Org)}, &d.Org); err != nil {
		c.fail(w, r, v, "opening the organization", err)
		return
	}
	d.BootURL = c.bootURL
	if v.Can("admin") {
		// every page: a token past the first page must still show, and
		// be revocable here
		toks, err := listAll[regapi.TokenInfo](r.Context(), c, v.S.token, orgPath(v.Org, "tokens"))
		if err != nil {
			c.fail(w, r, v, "listing API tokens", err)
			return
		}
		d.Tokens = toks
		enr, err := listAll[regapi.TokenInfo](r.Context(), c, v.S.token, orgPath(v.Org, "enrollment-tokens"))
		if err != nil {
			c.fail(w, r, v, "listing enrollment tokens", err)
			return
		}
		d.Enrollment = enr
	}
	v.Title, v.Section, v.Data = "Organization "+v.Org, "settings", d
	c.render(w, r, status, "settings", v)
}

func (c *Console) tokenCreate(w http.ResponseWriter, r *http.Request, v view) {
	c.issue(w, r, v, "tokens", "API token")
}

func (c *Console) enrollmentCreate(w http.ResponseWriter, r *http.Request, v view) {
	c.issue(w, r, v, "enrollment-tokens", "enrollment token")
}

// issue creates a token and shows it on this answer only: the page is not
// cached and a reload does not show it again.
func (c *Console) issue(w http.ResponseWriter, r *http.Request, v view, kind, what string) {
	v.Section = "settings"
	body := map[string]any{"name": strings.TrimSpace(r.PostFormValue("name"))}
	if kind == "tokens" {
		body["role"] = r.PostFormValue("role")
	}
	if max := strings.TrimSpace(r.PostFormValue("max_machines")); max != "" && kind == "enrollment-tokens" {
		n, err := strconv.Atoi(max)
		if err != nil {
			c.renderSettings(w, r, v, http.StatusUnprocessableEntity, settingsData{Form: r.PostForm,
				EnrollErrs: map[string]string{"max_machines": "must be a whole number of machines, or empty for no cap"}})
			return
		}
		body["max_machines"] = n
	}
	if exp := atParam(r.PostFormValue("expires_at")); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil {
			errs := map[string]string{"expires_at": "must be a time, such as the date picker's value or 2027-01-31T00:00:00Z"}
			d := settingsData{Form: r.PostForm}
			if kind == "tokens" {
				d.TokenErrors = errs
			} else {
				d.EnrollErrs = errs
			}
			c.renderSettings(w, r, v, http.StatusUnprocessableEntity, d)
			return
		}
		body["expires_at"] = t
	}
	var out regapi.TokenIssued
	if _, err := c.do(r.Context(), v.S.token, call{method: "POST", path: orgPath(v.Org, kind), body: body, idempotency: r.PostFormValue("idem")}, &out); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			d := settingsData{Form: r.PostForm}
			if kind == "tokens" {
				d.TokenErrors = fieldMap(err)
			} else {
				d.EnrollErrs = fieldMap(err)
			}
			c.renderSettings(w, r, v, http.StatusUnprocessableEntity, d)
			return
		}
		c.fail(w, r, v, "issuing the "+what, err)
		return
	}
	d := settingsData{NewToken: out.Token, NewKind: what, NewName: out.Info.Name}
	if kind == "enrollment-tokens" {
		d.ChainURL = c.chainURL(out.Token)
	}
	c.renderSettings(w, r, v, http.StatusCreated, d)
}

func (c *Console) tokenRevoke(w http.ResponseWriter, r *http.Request, v view) {
	c.revoke(w, r, v, "tokens", "API token")
}

func (c *Console) enrollmentRevoke(w http.ResponseWriter, r *http.Request, v view) {
	c.revoke(w, r, v, "enrollment-tokens", "enrollment token")
}

func (c *Console) revoke(w http.ResponseWriter, r *http.Request, v view, kind, what string) {
	v.Section = "settings"
	id := r.PathValue("id")
	if _, err := c.do(r.Context(), v.S.token, call{method: "DELETE", path: orgPath(v.Org, kind, id)}, nil); err != nil {
		c.fail(w, r, v, "revoking the "+what+" "+id, err)
		return
	}
	flash(w, r, "The "+what+" "+id+" is revoked; it stops working at once.")
	http.Redirect(w, r, v.orgURL("settings"), http.StatusSeeOther)
}
