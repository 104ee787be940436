// Package maintest runs a service binary's real main in a child process of
// its test binary, so that a test can check what the program does with its
// flags and environment (exit code and message) without building it.
package maintest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const childEnv = "ANVIL_MAINTEST_CHILD"

// Main is the test package's TestMain: in the child it runs main with the
// arguments after "--", otherwise the tests.
func Main(m *testing.M, main func()) {
	if os.Getenv(childEnv) == "1" {
		args := []string{os.Args[0]}
		for i, a := range os.Args {
			if a == "--" {
				args = append(args, os.Args[i+1:]...)
				break
			}
		}
		os.Args = args
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Run starts main in a child process with env added to this process's
// environment (and no ANVIL_ variable inherited) and returns its exit
// code and standard error.
func Run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	// A program that was not refused would run until stopped: it gets a
	// minute, then the test fails instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANVIL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"=1")
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case ctx.Err() != nil:
		t.Fatalf("the program was not refused: it still ran after a minute; stderr:\n%s", stderr.String())
		return -1, ""
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatalf("starting %s: %v", os.Args[0], err)
		return -1, ""
	}
}

// ExpectRefused checks that main stops with exit code 2, before it
// connects to anything, with a message that says each of want.
func ExpectRefused(t *testing.T, env []string, args []string, want ...string) {
	t.Helper()
	code, stderr := Run(t, env, args...)
	if code != 2 {
		t.Fatalf("exit code %d, want 2 (invalid configuration); stderr:\n%s", code, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
}
