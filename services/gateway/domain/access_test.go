package domain

import (
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

func TestAuthorize(t *testing.T) {
	admin := Principal{Org: "acme", Role: RoleAdmin}
	op := Principal{Org: "acme", Role: RoleOperator}
	viewer := Principal{Org: "acme", Role: RoleViewer}
	platform := Principal{Role: RolePlatform}
	cases := []struct {
		p    Principal
		org  string
		min  Role
		want errs.Kind
	}{
		{viewer, "acme", RoleViewer, ""},
		{viewer, "acme", RoleOperator, errs.KindForbidden},
		{viewer, "acme", RoleAdmin, errs.KindForbidden},
		{op, "acme", RoleOperator, ""},
		{op, "acme", RoleAdmin, errs.KindForbidden},
		{admin, "acme", RoleAdmin, ""},
		{admin, "acme", RolePlatform, errs.KindForbidden},
		{admin, "globex", RoleViewer, errs.KindNotFound},
		{viewer, "globex", RoleAdmin, errs.KindNotFound}, // not 403: no hint the org exists
		{platform, "globex", RoleAdmin, ""},
		{platform, "", RolePlatform, ""},
		{Principal{Org: "acme"}, "acme", RoleViewer, errs.KindForbidden},
	}
	for i, c := range cases {
		err := Authorize(c.p, c.org, c.min)
		if errs.KindOf(err) != c.want {
			t.Errorf("%d: %+v on %s needing %s: got %v, want %q", i, c.p, c.org, c.min, err, c.want)
		}
	}
}

func TestStatus(t *testing.T) {
	want := map[errs.Kind]int{
		errs.KindValidation: 422, errs.KindNotFound: 404, errs.KindConflict: 409, errs.KindPrecondition: 412,
		errs.KindForbidden: 403, errs.KindUnauthorized: 401, errs.KindUnavailable: 503, errs.KindInternal: 500,
	}
	for k, s := range want {
		if Status(k) != s {
			t.Errorf("%s -> %d, want %d", k, Status(k), s)
		}
	}
}
