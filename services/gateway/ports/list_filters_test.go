package ports

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// TestListFilterStatuses: a status filter outside its set is refused,
// naming the field, instead of answering an empty list; operations also
// take a machine operation's "cancelled".
func TestListFilterStatuses(t *testing.T) {
	for _, c := range []struct {
		status     string
		operations bool
		ok         bool
	}{
		{"", false, true}, {"active", false, true}, {"running", false, true}, {"aborted", false, true},
		{"cancelled", false, false}, {"bogus", false, false},
		{"", true, true}, {"active", true, true}, {"succeeded", true, true}, {"cancelled", true, true},
		{"bogus", true, false}, {"Running", true, false}, {"running_", true, false},
	} {
		r := httptest.NewRequest("GET", "/api/v1/orgs/acme/operations?status="+c.status, nil)
		r.SetPathValue("org", "acme")
		_, err := listRequest(r, c.operations)
		if c.ok != (err == nil) {
			t.Errorf("status %q (operations %v): err = %v, want ok %v", c.status, c.operations, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		fields := errs.As(err).Fields
		if len(fields) != 1 || fields[0].Field != "status" || !strings.Contains(fields[0].Reason, "must be one of") {
			t.Errorf("status %q: refusal %+v, want one naming status and the allowed values", c.status, fields)
		}
	}
}
