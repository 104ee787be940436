package client

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

const uuid = "4c4c4544-0042-3510-8052-b4c04f4e3132"

func newClient(t *testing.T, h http.HandlerFunc, base string) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + base, MachineUUID: uuid, Credential: "s3cret", UserAgent: "anvil-agent/test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRequestsCarryIdentityAndPaths(t *testing.T) {
	type seen struct{ method, path, rawQuery, auth, ua, ctype, body string }
	var got []seen
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), r.UserAgent(), r.Header.Get("Content-Type"), string(b)})
		w.WriteHeader(http.StatusNoContent)
	}, "/prefix/")
	ctx := context.Background()
	if err := c.Heartbeat(ctx, api.Heartbeat{BootedRevision: "r1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PollInstructions(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, "id/with slash", api.Ack{Status: api.AckDone}); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{"POST", "/prefix/agent/v1/machines/" + uuid + "/heartbeat", "", "Bearer s3cret", "anvil-agent/test", "application/json", `{"booted_revision":"r1"}`},
		{"GET", "/prefix/agent/v1/machines/" + uuid + "/instructions", "wait=30", "Bearer s3cret", "anvil-agent/test", "", ""},
		{"POST", "/prefix/agent/v1/machines/" + uuid + "/instructions/id%2Fwith%20slash/ack", "", "Bearer s3cret", "anvil-agent/test", "application/json", `{"status":"done"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests: %+v", len(got), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestProblemAndRetryAfter(t *testing.T) {
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(api.Problem{Title: "Too Many Requests", Status: 429, Detail: "slow down"})
	}, "")
	err := c.Heartbeat(context.Background(), api.Heartbeat{})
	if StatusCode(err) != 429 || RetryAfter(err) != 7*time.Second || IsPermanent(err) || IsAuth(err) {
		t.Fatalf("err = %v (status %d, retry after %v)", err, StatusCode(err), RetryAfter(err))
	}
	if !strings.Contains(err.Error(), "slow down") {
		t.Errorf("error does not carry the problem detail: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the credential: %v", err)
	}
}

func TestErrorClassification(t *testing.T) {
	for status, want := range map[int]struct{ auth, permanent bool }{
		401: {true, false}, 403: {true, false}, 404: {false, true}, 409: {false, true},
		408: {false, false}, 500: {false, false}, 503: {false, false},
	} {
		err := &Error{Op: "x", StatusCode: status}
		if IsAuth(err) != want.auth || IsPermanent(err) != want.permanent {
			t.Errorf("%d: auth=%v permanent=%v", status, IsAuth(err), IsPermanent(err))
		}
	}
	if IsPermanent(&Error{Op: "x", Err: errors.New("connection refused")}) {
		t.Error("transport errors must be retried")
	}
}

func TestPollDecodes(t *testing.T) {
	body := `{"instructions":[{"id":"a","kind":"reboot","revision":"r2","issued_at":"2026-01-01T00:00:00Z"},{"id":"b","kind":"wipe","revision":"r2"}]}`
	c := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}, "")
	res, err := c.PollInstructions(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Instructions) != 1 || res.Instructions[0].ID != "a" || len(res.Invalid) != 1 || res.Invalid[0].ID != "b" {
		t.Fatalf("res = %+v", res)
	}

	c = newClient(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html>proxy error</html>") }, "")
	res, err = c.PollInstructions(context.Background(), time.Second)
	if !errors.Is(err, api.ErrMalformed) || string(res.Body) != "<html>proxy error</html>" {
		t.Fatalf("err = %v, body %q", err, res.Body)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "-1": 0, "soon": 0,
		"99999999999": 24 * time.Hour,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{BaseURL: "ftp://x", MachineUUID: uuid, Credential: "c"},
		{BaseURL: "boot.example:8443", MachineUUID: uuid, Credential: "c"},
		{BaseURL: "https://x", Credential: "c"},
		{BaseURL: "https://x", MachineUUID: uuid},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestNewHTTPClientTrustsCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	caFile := t.TempDir() + "/ca.pem"
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, block, 0o600); err != nil {
		t.Fatal(err)
	}

	untrusting, err := New(Config{BaseURL: srv.URL, MachineUUID: uuid, Credential: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := untrusting.Heartbeat(context.Background(), api.Heartbeat{}); err == nil {
		t.Fatal("a self-signed server was trusted without the CA file")
	}

	hc, err := NewHTTPClient(caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{BaseURL: srv.URL, MachineUUID: uuid, Credential: "c", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(context.Background(), api.Heartbeat{}); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}

	if err := os.WriteFile(caFile, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHTTPClient(caFile); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
}
