package ports

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/boot/app"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
	"github.com/anvil-fleet/anvil/services/boot/domain/signing"
)

// An app without its dependencies panics on first use: the iPXE endpoints
// must still answer a script with 200, the others a 500 problem.
func TestPanicsNeverReachTheFirmware(t *testing.T) {
	keys, err := signing.NewKeys(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := &app.App{Keys: keys, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	a.Defaults()
	srv := httptest.NewServer(NewHTTP(a, HTTPOptions{Log: a.Log}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/ipxe?uuid=4c4c4544-0035-4b10-8056-b7c04f4e3532&mac=52-54-00-12-34-56&token=anvil_enroll_a_b")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || ipxe.Lint(string(body)) != nil || !strings.Contains(string(body), "failed unexpectedly") {
		t.Errorf("/ipxe after a panic: %d\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(logs.String(), "iPXE handler panicked") {
		t.Errorf("the panic was not logged:\n%s", logs.String())
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agent/v1/machines/4c4c4544-0035-4b10-8056-b7c04f4e3532/heartbeat", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+keys.SignCredential("acme", "4c4c4544-0035-4b10-8056-b7c04f4e3532", "mr-0123456789abcdef0123", time.Now()))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(resp.Header.Get("Content-Type"), "problem+json") {
		t.Errorf("agent API after a panic: %d %s", resp.StatusCode, body)
	}
}

func TestStatusOfEveryKind(t *testing.T) {
	for kind, want := range map[string]int{
		"validation": 422, "unauthorized": 401, "forbidden": 403, "not_found": 404, "conflict": 409,
		"precondition_failed": 412, "unavailable": 503, "internal": 500, "": 500,
	} {
		if got := statusOf(errsKind(kind)); got != want {
			t.Errorf("%s: %d, want %d", kind, got, want)
		}
	}
}

func errsKind(s string) errs.Kind { return errs.Kind(s) }

// A 5xx is logged at warn with the start of its answer (which names the
// failed dependency); an agent's routine success at debug; a failure
// whose client went away (its dependency call was cancelled with it) at
// info as 499.
func TestAccessLogLevels(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := accessLog(log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/agent/v1/machines/u/heartbeat" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeError(w, errs.Unavailable("the boot records: %s", strings.Repeat("x", 1000)))
	}))
	for _, path := range []string{"/agent/v1/machines/u/heartbeat", "/ignition"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(gone, "POST", "/agent/v1/machines/u/report", nil))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", lines)
	}
	var ok, failed, closed struct {
		Level    string
		Status   int
		Answer   string
		Answered int
	}
	if err := json.Unmarshal([]byte(lines[2]), &closed); err != nil || closed.Level != "INFO" || closed.Status != 499 ||
		closed.Answered != 503 || closed.Answer != "" {
		t.Errorf("client gone: %+v %v", closed, err)
	}
	if err := json.Unmarshal([]byte(lines[0]), &ok); err != nil || ok.Level != "DEBUG" || ok.Status != 204 || ok.Answer != "" {
		t.Errorf("heartbeat: %+v %v", ok, err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &failed); err != nil || failed.Level != "WARN" || failed.Status != 503 ||
		!strings.Contains(failed.Answer, "the boot records") || len(failed.Answer) > failureHead {
		t.Errorf("failure: %+v %v", failed, err)
	}
}

// firmwareFirst routes exactly as the mux it stands in front of: the same
// handler, the same pattern (the span's name, the metric's route), for
// the firmware paths, their neighbours and any method.
func TestFirmwareFirstRoutesAsTheMux(t *testing.T) {
	var ran, pattern string
	handler := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { ran, pattern = name, r.Pattern }
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/boot.ipxe", handler("chain"))
	mux.HandleFunc("/ipxe", handler("machine"))
	mux.HandleFunc("GET /ignition", handler("ignition"))
	mux.HandleFunc("GET /assets/", handler("asset"))
	fast := firmwareFirst(mux, handler("chain"), handler("machine"))
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, "BREW"} {
		for _, target := range []string{"/ipxe?uuid=u", "/boot.ipxe", "/%69pxe", "/ipxe/", "//ipxe", "/a/../ipxe", "/IPXE", "/ignition", "/assets/x", "/"} {
			serve := func(h http.Handler) (string, string, int) {
				ran, pattern = "", ""
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(method, target, nil))
				return ran, pattern, w.Code
			}
			wantRan, wantPattern, wantCode := serve(mux)
			if gotRan, gotPattern, gotCode := serve(fast); gotRan != wantRan || gotPattern != wantPattern || gotCode != wantCode {
				t.Errorf("%s %s: ran %q, pattern %q, %d; the mux: %q, %q, %d", method, target, gotRan, gotPattern, gotCode, wantRan, wantPattern, wantCode)
			}
		}
	}
}
