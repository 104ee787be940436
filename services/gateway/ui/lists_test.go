package ui_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The console shows whole lists, not the API's first page (100 by
// default): more than 100 API tokens, enrollment tokens and organizations
// all show, and the newest token can be revoked from the Settings page.
func TestConsoleShowsWholeLists(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	s := startStack(t)
	admin := s.org("bulk", "Bulk", "admin")["admin"]

	const apiTokens, enrollTokens = 105, 102
	var last string // the newest API token's id: past the API's first page
	for i := 1; i <= apiTokens; i++ {
		var out struct {
			Info struct{ ID string }
		}
		s.mustAPI(201, "POST", "/api/v1/orgs/bulk/tokens", admin, map[string]string{"name": fmt.Sprintf("bulk-api-%03d", i), "role": "viewer"}, &out)
		last = out.Info.ID
	}
	for i := 1; i <= enrollTokens; i++ {
		s.mustAPI(201, "POST", "/api/v1/orgs/bulk/enrollment-tokens", admin, map[string]string{"name": fmt.Sprintf("bulk-enroll-%03d", i)}, nil)
	}
	// the API's first page indeed leaves some out
	var first struct {
		Items []struct{ ID string }
		Next  string
	}
	s.mustAPI(200, "GET", "/api/v1/orgs/bulk/tokens", admin, nil, &first)
	if len(first.Items) != 100 || first.Next == "" {
		t.Fatalf("the API's first page of tokens: %d items, next %q; the test needs more than one page", len(first.Items), first.Next)
	}

	c := s.client()
	c.signIn(admin)
	var settings page
	s.eventually("the Settings page shows every token", 20*time.Second, func() (bool, string) {
		settings = c.get("/ui/orgs/bulk/settings")
		if settings.status != http.StatusOK {
			return false, fmt.Sprintf("status %d", settings.status)
		}
		for i := 1; i <= apiTokens; i++ {
			if n := fmt.Sprintf("<td>bulk-api-%03d</td>", i); !strings.Contains(settings.body, n) {
				return false, "lacks " + n
			}
		}
		for i := 1; i <= enrollTokens; i++ {
			if n := fmt.Sprintf("<td>bulk-enroll-%03d</td>", i); !strings.Contains(settings.body, n) {
				return false, "lacks " + n
			}
		}
		return true, ""
	})
	// the newest (the 105th) has its revoke form, and it works
	action := "/ui/orgs/bulk/tokens/" + last + "/revoke"
	settings.mustContain(t, `action="`+action+`"`, "Revoke bulk-api-105")
	p := c.post(action, url.Values{"csrf": {settings.field("csrf")}}, nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("revoking the 105th token: %d\n%s", p.status, mainOf(p.body))
	}
	s.eventually("the 105th token is revoked", 10*time.Second, func() (bool, string) {
		st := tokenStatus(s, admin, last)
		return st == "revoked", st
	})
	c.get("/ui/orgs/bulk/settings").mustContain(t, "The API token "+last+" is revoked")

	// a platform admin sees every organization
	ids := []string{"bulk"}
	for i := 1; i <= 101; i++ {
		id := fmt.Sprintf("org-%03d", i)
		s.mustAPI(201, "POST", "/api/v1/orgs", s.adminTok, map[string]string{"id": id, "display_name": "Org"}, nil)
		ids = append(ids, id)
	}
	platform := s.client()
	platform.signIn(s.adminTok)
	s.eventually("the Organizations page shows every organization", 20*time.Second, func() (bool, string) {
		p := platform.get("/ui/orgs")
		if p.status != http.StatusOK {
			return false, fmt.Sprintf("status %d", p.status)
		}
		for _, id := range ids {
			if l := `href="/ui/orgs/` + id + `/machines"`; !strings.Contains(p.body, l) {
				return false, "lacks " + l
			}
		}
		return true, ""
	})
}

// tokenStatus reads one API token's status from every page of the API's
// list.
func tokenStatus(s *stack, token, id string) string {
	s.t.Helper()
	for cursor := ""; ; {
		var l struct {
			Items []struct{ ID, Status string }
			Next  string
		}
		s.mustAPI(200, "GET", "/api/v1/orgs/bulk/tokens?cursor="+url.QueryEscape(cursor), token, nil, &l)
		for _, it := range l.Items {
			if it.ID == id {
				return it.Status
			}
		}
		if l.Next == "" {
			return "absent"
		}
		cursor = l.Next
	}
}
