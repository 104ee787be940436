package anvilctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/cli/anvilctl"
)

// syncBuffer is a buffer that a watching command writes while the test
// reads it.
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

// waitOutput waits until a running command has written want.
func waitOutput(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	waitWritten(t, b, fmt.Sprintf("%q", want), func(out string) bool { return strings.Contains(out, want) })
}

// waitRow waits until b has a table row of these cells, however wide its
// columns are (a watch sizes them to the rows of each poll).
func waitRow(t *testing.T, b *syncBuffer, cells ...string) {
	t.Helper()
	quoted := make([]string, len(cells))
	for i, c := range cells {
		quoted[i] = regexp.QuoteMeta(c)
	}
	row := regexp.MustCompile("(?m)^" + strings.Join(quoted, " {3,}") + "$")
	waitWritten(t, b, "the row "+strings.Join(cells, " "), row.MatchString)
}

func waitWritten(t *testing.T, b *syncBuffer, what string, written func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !written(b.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("never written: %s\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// background runs a command line until it returns, as Main does (exit
// code); stdout is readable while it runs.
type background struct {
	out  syncBuffer
	errb syncBuffer
	code chan int
}

func (s *cliStack) start(ctx context.Context, args ...string) *background {
	b := &background{code: make(chan int, 1)}
	go func() {
		b.code <- anvilctl.Run(ctx, anvilctl.Env{Stdout: &b.out, Stderr: &b.errb, Getenv: func(k string) string { return s.env[k] }}, args)
	}()
	return b
}

func (b *background) wait(t *testing.T) int {
	t.Helper()
	select {
	case c := <-b.code:
		return c
	case <-time.After(30 * time.Second):
		t.Fatalf("the command did not end:\n%s\n%s", b.out.String(), b.errb.String())
		return -1
	}
}

// Rollouts through the CLI against the whole control plane (devstack, the
// real rollout service): without a reachable cluster a rollout fails its
// sanity checks, and one started --after it waits, pending, for as long as
// it is not retried or aborted. That is enough to drive every command;
// the seed story (seedstory_test.go) watches rollouts succeed against a
// real Kubernetes API server.
func TestCLIRollouts(t *testing.T) {
	s, _, viewer := startStack(t)
	s.must("apply", "-f", writeFile(t, "fleet.yaml", fleet), "--apply")
	var list struct {
		Items []struct {
			ID, Status string
			Version    json.Number
		}
	}
	s.eventually(func() bool {
		out, _, err := s.run("get", "rollouts", "-o", "json")
		return err == nil && json.Unmarshal([]byte(out), &list) == nil && len(list.Items) == 1 && list.Items[0].Status == "failed"
	})
	failed := list.Items[0].ID

	out := s.must("rollout", "start", "--pool", "workers", "--after", failed)
	if !strings.HasPrefix(out, "rollout/ro-") || !strings.Contains(out, "started (pending)") {
		t.Fatalf("rollout start: %s", out)
	}
	pending := strings.TrimPrefix(strings.Fields(out)[0], "rollout/")

	out = s.must("get", "rollouts", "-o", "wide", "--sort-by", ".status")
	if !strings.Contains(out, "AFTER") || !strings.Contains(out, failed) || strings.Index(out, failed) > strings.Index(out, pending) {
		t.Fatalf("get rollouts -o wide --sort-by .status:\n%s", out)
	}
	if out := s.must("get", "operations", "--kind", "rollout", "-o", "name"); !strings.Contains(out, "operation/"+pending+"\n") || !strings.Contains(out, "operation/"+failed+"\n") {
		t.Fatalf("get operations -o name: %s", out)
	}
	out = s.must("rollout", "status", failed)
	if !strings.Contains(out, "rollout "+failed+": pool workers, revision 1") || !strings.Contains(out, "0/0 done, 0 in progress, 0 failed: failed (sanity checks failed") {
		t.Fatalf("rollout status: %s", out)
	}
	// pool/<pool> is the pool's latest rollout
	if out := s.must("rollout", "status", "pool/workers", "-o", "jsonpath={.id} {.after}"); out != pending+" "+failed {
		t.Fatalf("rollout status pool/workers: %q", out)
	}

	// --timeout: the pending rollout does not end; exit 3
	b := s.start(t.Context(), "rollout", "status", pending, "--timeout", "1s")
	if code := b.wait(t); code != anvilctl.ExitTimeout || !strings.Contains(b.errb.String(), "timed out after 1s waiting for rollout "+pending+" to end (status pending)") ||
		!strings.Contains(b.out.String(), "rollout "+pending+": pool workers, revision 1, after "+failed) {
		t.Fatalf("rollout status --timeout: exit %d\n%s\n%s", code, b.out.String(), b.errb.String())
	}

	// conditional and refused controls
	if _, _, err := s.run("rollout", "retry", failed, "--if-match", "1"); err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("a stale retry: %v", err)
	}
	version := s.must("get", "rollout", pending, "-o", "jsonpath={.version}")
	if out := s.must("rollout", "pause", pending, "--reason", "lunch", "--if-match", version); out != "rollout/"+pending+" paused (status paused)\n" {
		t.Fatalf("pause: %q", out)
	}
	if _, _, err := s.run("rollout", "resume", pending, "--if-match", version); err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("a stale resume: %v", err)
	}
	if _, _, err := s.run("rollout", "retry", pending); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("retry a paused rollout: %v", err)
	}
	if out := s.must("rollout", "resume", pending); !strings.HasPrefix(out, "rollout/"+pending+" resumed (status ") {
		t.Fatalf("resume: %q", out)
	}
	s.env["ANVIL_TOKEN"] = viewer
	if _, _, err := s.run("rollout", "abort", pending); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a viewer aborts: %v", err)
	}
	s.env["ANVIL_TOKEN"] = s.adminTok

	// a watch of the pending rollout and a watch of the rollouts list, both
	// live while the rollout is aborted; Ctrl-C ends the list's (exit 0)
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	status := s.start(t.Context(), "rollout", "status", "rollout/"+pending, "--watch")
	waitOutput(t, &status.out, "rollout "+pending+": pool workers, revision 1, after "+failed)
	watch := s.start(ctx, "get", "rollouts", "--watch", "--output-watch-events", "--watch-interval", "100ms", "-o", "custom-columns=ID:.id,STATUS:.status")
	waitOutput(t, &watch.out, "ADDED   "+pending+"   pending")
	if out := s.must("rollout", "abort", pending, "--reason", "no cluster"); out != "rollout/"+pending+" aborted (status aborted)\n" {
		t.Fatalf("abort: %q", out)
	}
	if code := status.wait(t); code != anvilctl.ExitFailed || !strings.Contains(status.errb.String(), "error: rollout "+pending+" aborted") {
		t.Fatalf("the watch of an aborted rollout: exit %d\n%s\n%s", code, status.out.String(), status.errb.String())
	}
	waitOutput(t, &watch.out, "MODIFIED   "+pending+"   aborted")
	interrupt()
	if code := watch.wait(t); code != 0 {
		t.Fatalf("get -w after Ctrl-C: exit %d\n%s", code, watch.errb.String())
	}
	if lines := strings.Split(strings.TrimSpace(watch.out.String()), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "EVENT ") {
		t.Fatalf("get -w printed:\n%s", watch.out.String())
	}

	// retry: the failed rollout runs its checks again, and fails again
	if out := s.must("rollout", "retry", failed, "-o", "name"); out != "rollout/"+failed+"\n" {
		t.Fatalf("retry -o name: %q", out)
	}
	b = s.start(t.Context(), "rollout", "status", failed, "--watch")
	if code := b.wait(t); code != anvilctl.ExitFailed || !strings.Contains(b.errb.String(), "rollout "+failed+" failed: sanity checks failed") {
		t.Fatalf("watch the retried rollout: exit %d\n%s\n%s", code, b.out.String(), b.errb.String())
	}
	b = s.start(t.Context(), "rollout", "status", "ro-0000000000000000000f", "--watch")
	if code := b.wait(t); code != 1 || !strings.Contains(b.errb.String(), "404") {
		t.Fatalf("watch a missing rollout: exit %d %s", code, b.errb.String())
	}
}
