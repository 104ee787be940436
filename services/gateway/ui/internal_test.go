package ui

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// The session store on a real JetStream: a session opens with its id
// only, expires, and ends.
func TestSessionStore(t *testing.T) {
	env := eventstest.Start(t, events.NewRegistry())
	js, err := jetstream.New(env.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := newSessionStore(ctx, js, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	id, s, err := store.create(ctx, "anvil_api_secret", "acme", "operator", now)
	if err != nil {
		t.Fatal(err)
	}
	if s.CSRF == "" || s.CSRF == id || !s.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("session: %+v", s)
	}
	got, err := store.get(ctx, id, now.Add(time.Minute))
	if err != nil || got.token != "anvil_api_secret" || got.Org != "acme" || got.Role != "operator" || got.CSRF != s.CSRF {
		t.Fatalf("get: %+v %v", got, err)
	}
	// another id, even one differing in one character, opens nothing
	last := byte('A')
	if id[len(id)-1] == 'A' {
		last = 'B'
	}
	other := id[:len(id)-1] + string(last)
	if _, err := store.get(ctx, other, now); !errors.Is(err, errNoSession) {
		t.Fatalf("a forged id: %v", err)
	}
	if _, err := store.get(ctx, "short", now); !errors.Is(err, errNoSession) {
		t.Fatalf("a malformed id: %v", err)
	}
	// expiry: refused, and forgotten
	if _, err := store.get(ctx, id, now.Add(time.Hour)); !errors.Is(err, errNoSession) {
		t.Fatalf("an expired session: %v", err)
	}
	if _, err := store.kv.Get(ctx, bucketKey(id)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an expired session stays in the bucket: %v", err)
	}
	// end
	id2, s2, _ := store.create(ctx, "tok2", "acme", "viewer", now)
	if err := store.end(ctx, s2); err != nil {
		t.Fatal(err)
	}
	if _, err := store.get(ctx, id2, now); !errors.Is(err, errNoSession) {
		t.Fatalf("an ended session: %v", err)
	}
	// the sealed token opens only with its id
	sealed, _ := seal(id, "tok")
	if _, err := open(id2, sealed); err == nil {
		t.Fatal("a token opened with another session's id")
	}
}

func TestCSRFCheck(t *testing.T) {
	want := csrfToken("a-session-id")
	if want == csrfToken("another-session") {
		t.Fatal("two sessions share a CSRF token")
	}
	for form, ok := range map[string]bool{"csrf=" + want: true, "csrf=" + want + "x": false, "csrf=": false, "": false} {
		r := httptest.NewRequest("POST", "/ui/x", strings.NewReader(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if got := checkCSRF(r, want); got != ok {
			t.Errorf("form %q: %v, want %v", form, got, ok)
		}
	}
	for _, tc := range []struct {
		origin, referer, host string
		ok                    bool
	}{
		{"http://console.example", "", "console.example", true},
		{"https://evil.example", "", "console.example", false},
		{"", "http://console.example/ui/orgs", "console.example", true},
		{"", "https://evil.example/", "console.example", false},
		{"", "", "console.example", true}, // the CSRF token still guards
		{"null", "", "console.example", true},
	} {
		r := httptest.NewRequest("POST", "http://"+tc.host+"/ui/x", nil)
		r.Header.Set("Origin", tc.origin)
		r.Header.Set("Referer", tc.referer)
		if sameOrigin(r) != tc.ok {
			t.Errorf("origin %q referer %q: %v", tc.origin, tc.referer, !tc.ok)
		}
	}
}

// Every page template renders, and whatever the API or a user wrote is
// escaped in text, attributes and URLs.
func TestTemplatesEscape(t *testing.T) {
	p, err := loadPages()
	if err != nil {
		t.Fatal(err)
	}
	const evil = `"><script>alert(1)</script><a href="javascript:alert(2)">`
	c := &Console{pages: p, log: slog.New(slog.DiscardHandler)}
	sess := &session{Role: "admin", CSRF: `c"s<rf`}
	v := view{S: sess, Org: "acme", OrgName: evil, Title: evil, Section: "pools"}
	cases := map[string]any{
		"error":   trouble{Status: 409, Headline: evil, Happened: evil, ToDo: evil, Detail: evil, Fields: []fieldError{{Field: evil, Reason: evil}}, BackURL: "javascript:alert(3)", BackLabel: evil},
		"signin":  signInData{CSRF: evil, Next: evil, Error: evil},
		"orgs":    orgListData{Items: []orgItem{{ID: evil, DisplayName: evil}}, Errors: map[string]string{"id": evil}},
		"pools":   poolListData{Items: []rev.PoolSummary{{Name: evil, DisplayName: evil, Cluster: evil}}},
		"pool":    poolData{New: true, Form: poolForm{"name": evil, "network": evil}, Errors: map[string]string{"": evil, "network": evil}, Clusters: []rev.Cluster{{Name: evil}}},
		"audit":   auditData{AggID: evil},
		"machine": machineDetailData{Tab: "info"},
	}
	for name, data := range cases {
		rec := httptest.NewRecorder()
		vv := v
		vv.Data = data
		c.render(rec, httptest.NewRequest("GET", "/ui/x", nil), 200, name, vv)
		body := rec.Body.String()
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", name, rec.Code, body)
		}
		for _, bad := range []string{"<script>alert(1)", `href="javascript:`, `value="c"s<rf"`} {
			if strings.Contains(body, bad) {
				t.Errorf("%s renders %q unescaped", name, bad)
			}
		}
	}
}

func TestFormErrorsLandNextToTheirField(t *testing.T) {
	got := formErrors(map[string]string{
		"kubernetes.minor":                     "is not supported",
		"network.vlans[1].id":                  "must be 1 to 4094",
		"taints[0].effect":                     "must be NoSchedule, PreferNoSchedule or NoExecute",
		"rollout.maintenance_windows[0].start": "must be HH:MM",
		"org":                                  "mystery",
	}, poolFormFields)
	want := map[string]string{
		"kubernetes.minor":            "is not supported",
		"network":                     "network.vlans[1].id: must be 1 to 4094",
		"taints":                      "taints[0].effect: must be NoSchedule, PreferNoSchedule or NoExecute",
		"rollout.maintenance_windows": "rollout.maintenance_windows[0].start: must be HH:MM",
		"":                            "org: mystery",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestPoolFormRoundTrip(t *testing.T) {
	grace := "30s"
	spec := rev.PoolSpec{DisplayName: "Workers", Kubernetes: rev.Kubernetes{Minor: "1.37"}, Flatcar: rev.Flatcar{Channel: "stable", Version: "4230.2.3"},
		Network:    rev.Network{VLANs: []rev.VLAN{{ID: 42, Parent: "eno1"}}},
		CacheDisk:  &rev.CacheDisk{Device: "/dev/sdb", Filesystem: "ext4", Wipe: true},
		NodeLabels: map[string]string{"a": "b", "c": "d"}, Taints: []rev.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}, {Key: "x", Effect: "NoExecute"}},
		KubeletExtraArgs: map[string]string{"max-pods": "200"}, SSHKeys: []string{"ssh-ed25519 AAAA a@b"},
		Rollout: rev.Rollout{MaxUnavailable: "25%", Pause: "10s", DrainTimeout: "15m", DrainGracePeriod: &grace, NodeReadyTimeout: "10m",
			MaintenanceWindows: []rev.MaintenanceWindow{{Days: []string{"sat"}, Start: "02:00", End: "05:00", TimeZone: "UTC"}},
			Remediation:        &rev.Remediation{MaxInFlight: 2}},
		AutoApplyPlatformRevisions: true}
	f := formOfSpec("workers", "prod", spec)
	values := map[string][]string{}
	for k, v := range f {
		values[k] = []string{v}
	}
	got, _, errs := specOfForm(values)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !reflect.DeepEqual(got, spec) {
		t.Fatalf("the form loses settings:\n got %+v\nwant %+v", got, spec)
	}
	_, _, errs = specOfForm(map[string][]string{"taints": {"no-effect"}, "network": {"{"}, "node_labels": {"novalue"}})
	for _, k := range []string{"taints", "network", "node_labels"} {
		if errs[k] == "" {
			t.Errorf("no error for %s: %v", k, errs)
		}
	}
}

func TestSideBySide(t *testing.T) {
	rows := unifiedRows("--- a\n+++ b\n@@ -1,4 +1,4 @@\n same\n-old1\n-old2\n+new1\n tail\n+added\n")
	var kinds []string
	for _, r := range rows {
		kinds = append(kinds, r.Kind+":"+r.Left+"|"+r.Right)
	}
	want := []string{"hunk:@@ -1,4 +1,4 @@|", "same:same|same", "changed:old1|new1", "removed:old2|", "same:tail|tail", "added:|added"}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("got %q\nwant %q", kinds, want)
	}
}

func TestSmallParsers(t *testing.T) {
	if got := atParam("2026-11-02T09:30"); got != "2026-11-02T09:30:00Z" {
		t.Errorf("datetime-local: %s", got)
	}
	if got := atParam(" 1234 "); got != "1234" {
		t.Errorf("sequence: %s", got)
	}
	for next, want := range map[string]string{"/ui/orgs/a": "/ui/orgs/a", "//evil.example/ui/": "", "https://evil.example/ui/": "", "/ui/\\evil": "", "/api/v1/orgs": ""} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q", next, got)
		}
	}
	if m, err := parseMap("a=b, c = d\n\ne=f"); err != nil || !reflect.DeepEqual(m, map[string]string{"a": "b", "c": "d", "e": "f"}) {
		t.Errorf("parseMap: %v %v", m, err)
	}
	if got := ago(time.Unix(1000, 0), time.Unix(1000+3*3600, 0)); got != "3h ago" {
		t.Errorf("ago: %s", got)
	}
	tr := describe(&apiError{problem: problem{Status: http.StatusServiceUnavailable}}, "listing machines", "acme")
	if !strings.Contains(tr.Happened, "listing machines") || !strings.Contains(tr.ToDo, "readyz") {
		t.Errorf("503 advice: %+v", tr)
	}
}

// A running rollout's page says why it waits, until when, and when it
// last moved, from the API's conditions.
func TestRolloutPageSaysWhyItWaits(t *testing.T) {
	p, err := loadPages()
	if err != nil {
		t.Fatal(err)
	}
	c := &Console{pages: p, log: slog.New(slog.DiscardHandler)}
	opens := time.Date(2026, 11, 28, 2, 0, 0, 0, time.UTC)
	var ro rolloutapi.Rollout
	ro.ID, ro.Pool, ro.Status, ro.Revision = "ro-1", "workers", "running", 2
	ro.StartedAt = opens.Add(-time.Hour)
	ro.Conditions = []rolloutapi.Condition{{Type: "Progressing", Status: "False", Reason: "OutsideMaintenanceWindow",
		Message: "no machine begins outside the pool's maintenance windows", Until: opens}}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("GET", "/ui/x", nil), 200, "rollout",
		view{S: &session{Role: "viewer"}, Org: "acme", Section: "rollouts", Data: rolloutData{R: ro}})
	body := rec.Body.String()
	for _, want := range []string{"Why it waits", "OutsideMaintenanceWindow", "maintenance windows", "until 2026-11-28 02:00:00Z", "no estimate yet"} {
		if !strings.Contains(body, want) {
			t.Errorf("the rollout page lacks %q", want)
		}
	}
}
