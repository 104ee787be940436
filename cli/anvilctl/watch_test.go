package anvilctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
)

// Only the network and a gateway or service not answering for now are
// worth asking again; every other error would come back at each poll.
func TestTransient(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "http://127.0.0.1:1/api/v1/orgs/acme/machines",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	problem := func(status int) error {
		return apiErr(fmt.Errorf("list machines: %w", &client.Problem{Status: status}))
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"connection refused, wrapped", fmt.Errorf("machines/u1: %w", refused), true},
		{"a net.Error", &net.DNSError{Err: "timeout", Name: "gw", IsTimeout: true}, true},
		{"an answer cut short", fmt.Errorf("decode: %w", io.ErrUnexpectedEOF), true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"ECONNREFUSED alone", syscall.ECONNREFUSED, true},
		{"502", problem(http.StatusBadGateway), true},
		{"503", problem(http.StatusServiceUnavailable), true},
		{"504", problem(http.StatusGatewayTimeout), true},
		{"401", problem(http.StatusUnauthorized), false},
		{"403", problem(http.StatusForbidden), false},
		{"404", problem(http.StatusNotFound), false},
		{"422", problem(http.StatusUnprocessableEntity), false},
		{"500", problem(http.StatusInternalServerError), false},
		{"no organization", errors.New("no organization: pass --org, set ANVIL_ORG, or put org: in the config file's context"), false},
		{"a template that fails", errors.New("--sort-by: {.x}: x is not found"), false},
		{"EOF", io.EOF, false},
		{"interrupted", context.Canceled, false},
		{"interrupted during a request", &url.Error{Op: "Get", URL: "http://gw", Err: context.Canceled}, false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("%s: transient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// get -w without an organization ends at once with the error (exit 1); it
// used to print "(retrying)" and ask again forever.
func TestWatchWithoutOrgEnds(t *testing.T) {
	for _, args := range [][]string{
		{"get", "machines", "-w"},
		{"get", "pool", "workers", "--watch", "--watch-interval", "10ms"},
	} {
		var out, errb bytes.Buffer
		code := make(chan int, 1)
		go func() {
			code <- Run(t.Context(), Env{Stdout: &out, Stderr: &errb, Getenv: envOf(map[string]string{"HOME": t.TempDir()})}, args)
		}()
		select {
		case c := <-code:
			if c != ExitError || out.Len() != 0 || !strings.HasPrefix(errb.String(), "error: ") || !strings.Contains(errb.String(), "no organization") ||
				strings.Contains(errb.String(), "retrying") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, c, out.String(), errb.String())
			}
		case <-time.After(30 * time.Second): // a bound, so that a regression fails instead of hanging
			t.Fatalf("%v did not end: the watch retries an error that cannot pass", args)
		}
	}
}

// get -w prints the objects of a poll as one table, so the first list's
// columns line up as get's do; each row used to be sized on its own.
func TestWatchAlignsEachPoll(t *testing.T) {
	var out bytes.Buffer
	p := mustPrinter(t, "custom-columns=HOST:.hostname,RACK:.labels.rack")
	wt := &watcher{p: p, w: &out, reqs: []request{{r: kind(t, "machines")}}, o: &getCmdOptions{watchEvents: true},
		seen: []map[string]seenObject{{}}, tables: []*tableWriter{{}}, headed: []bool{false}, custom: &tableWriter{},
		tableRows: make([][][]string, 1)}
	poll := func(hosts ...string) {
		t.Helper()
		var objs []named
		for _, h := range hosts {
			objs = append(objs, named{h, obj(`{"uuid":"` + h + `","hostname":"` + h + `","labels":{"rack":"r1"}}`)})
		}
		if err := wt.show([][]named{objs}, out.Len() == 0); err != nil {
			t.Fatal(err)
		}
	}
	poll("w1", "longerhost")
	poll("w1", "longerhost", "w3")
	want := "EVENT   HOST         RACK\nADDED   w1           r1\nADDED   longerhost   r1\nADDED   w3           r1\n"
	if out.String() != want {
		t.Fatalf("custom-columns:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	wt.p, wt.o.watchEvents = mustPrinter(t, "table"), false
	wt.seen[0] = map[string]seenObject{}
	poll("w1", "longerhost")
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, l := range lines[1:] {
		if strings.Index(l, "-") != strings.Index(lines[0], "STATUS") {
			t.Errorf("the rows do not line up under STATUS:\n%s", out.String())
		}
	}
}
