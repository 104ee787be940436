package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFlagsAndErrors(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	for _, name := range []string{"--env-file", "--revision-file", "--state-file", "--root", "--log-level"} {
		if !strings.Contains(out.String(), strings.TrimPrefix(name, "-")) {
			t.Errorf("usage does not document %s", name)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"--version"}, &out); err != nil || !strings.Contains(out.String(), "anvil-agent dev") {
		t.Errorf("--version: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"--log-level", "chatty"}, &out); err == nil {
		t.Error("bad log level accepted")
	}
	if err := run(context.Background(), []string{"--env-file", "/nonexistent/agent.env"}, &out); err == nil {
		t.Error("missing env file accepted")
	}
}

// TestRunsFromItsFiles wires the binary's files and flags together against a
// minimal server and stops it with its context, as SIGTERM would.
func TestRunsFromItsFiles(t *testing.T) {
	const cred = "cred-from-env-file"
	var mu sync.Mutex
	var paths []string
	got := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			select {
			case got <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	dir := t.TempDir()
	env := filepath.Join(dir, "agent.env")
	rev := filepath.Join(dir, "revision")
	must(t, os.WriteFile(env, []byte("# test\nANVIL_BOOT_URL="+srv.URL+"\nANVIL_MACHINE_UUID=4c4c4544-0042-3510-8052-b4c04f4e3132\nANVIL_AGENT_CREDENTIAL="+cred+"\nANVIL_HEARTBEAT_SECONDS=1\n"), 0o600))
	must(t, os.WriteFile(rev, []byte("rev-9\n"), 0o644))

	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--env-file", env, "--revision-file", rev, "--state-file", filepath.Join(dir, "state.json"),
			"--root", "../../inventory/testdata/host", "--log-level", "debug"}, &logs)
	}()
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no heartbeat")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, p := range paths {
		if p == "POST /agent/v1/machines/4c4c4544-0042-3510-8052-b4c04f4e3132/heartbeat Bearer "+cred {
			found = true
		}
	}
	if !found {
		t.Errorf("no authenticated heartbeat among %v", paths)
	}
	if strings.Contains(logs.String(), cred) {
		t.Error("the credential appears in the logs")
	}
	if !strings.Contains(logs.String(), `"booted_revision":"rev-9"`) {
		t.Errorf("startup log line does not show the booted revision:\n%s", logs.String())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunsFromTheRenderersEnvFile runs the binary from the env file exactly
// as the revisions service renders it (ANVIL_URL, ANVIL_MACHINE_REVISION,
// the credential, no UUID) with the UUID read from SMBIOS and the revision
// file missing.
func TestRunsFromTheRenderersEnvFile(t *testing.T) {
	const cred = "cred-from-the-renderer-0123"
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") && r.Header.Get("Authorization") == "Bearer "+cred {
			select {
			case got <- r.URL.Path:
			default:
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	must(t, os.MkdirAll(filepath.Join(root, "sys/class/dmi/id"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sys/class/dmi/id/product_uuid"), []byte("4C4C4544-0035-4B10-8056-B7C04F4E3532\n"), 0o400))
	env := filepath.Join(dir, "agent.env")
	must(t, os.WriteFile(env, []byte("ANVIL_URL="+srv.URL+"\nANVIL_MACHINE_REVISION=mr-0123456789abcdef0123\nANVIL_AGENT_CREDENTIAL="+cred+"\n"), 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--env-file", env, "--revision-file", filepath.Join(dir, "missing-revision"),
			"--state-file", filepath.Join(dir, "state.json"), "--root", root}, &logs)
	}()
	select {
	case p := <-got:
		if p != "/agent/v1/machines/4c4c4544-0035-4b10-8056-b7c04f4e3532/heartbeat" {
			t.Errorf("heartbeat path %s", p)
		}
	case err := <-done:
		t.Fatalf("agent stopped: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no heartbeat\n%s", logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"booted_revision":"mr-0123456789abcdef0123"`) {
		t.Errorf("the env file's revision was not used:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), cred) {
		t.Error("the credential appears in the logs")
	}
}

// syncBuffer is a bytes.Buffer safe for the agent's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
