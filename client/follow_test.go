package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// follow collects a followed log until the sequence ends.
func follow(ctx context.Context, c *client.Client, id string, from int) ([]client.LogEvent, error) {
	var out []client.LogEvent
	for ev, err := range c.FollowOperationLog(ctx, id, from) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// TestFollowOperationLog follows the log of a rollout through the
// client, over the gateway's Server-Sent Events: every entry with its
// index, as the JSON pages have them, the status as it changes (the
// rollout fails, the test aborts it), then the end; again from an index;
// a loop that breaks early; and a missing operation as a *Problem.
func TestFollowOperationLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newOrg(t, "follow")
	if _, err := c.CreateCluster(ctx, client.ClusterCreate{Name: "prod", APIEndpoint: "https://api.prod.example:6443", KubernetesVersion: kubernetesVersion,
		Kubeconfig: kubeconfig, BootstrapToken: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	spec := client.PoolSpec{DisplayName: "Workers", PoolConfig: client.PoolConfig{
		Kubernetes: client.Kubernetes{Minor: "1.33"}, Flatcar: client.Flatcar{Channel: "stable", Version: "4230.2.3"}}}
	ch, err := c.CreatePool(ctx, client.PoolCreate{Name: "workers", Cluster: "prod", PoolSpec: spec, Apply: true})
	if err != nil || ch.Rollout == "" {
		t.Fatalf("save & apply: %+v %v", ch, err)
	}
	// The cluster does not answer: the rollout fails its sanity checks and
	// waits for a retry or an abort, the stream open; the test aborts it
	// when the stream says failed, and the stream goes on to its end.
	var evs []client.LogEvent
	aborted := false
	eventstest.Eventually(t, "the rollout's log streams to its end", time.Minute, 50*time.Millisecond, func() (bool, string) {
		evs = nil
		for ev, err := range c.FollowOperationLog(ctx, ch.Rollout, 0) {
			if err != nil {
				return false, err.Error() // the rollout may answer 404 for a moment
			}
			evs = append(evs, ev)
			if ev.Kind == client.LogEventStatus && ev.Status == "failed" && !aborted {
				if _, err := c.AbortRollout(ctx, ch.Rollout, "the cluster is not there"); err != nil {
					return false, err.Error()
				}
				aborted = true
			}
		}
		return len(evs) > 0 && evs[len(evs)-1].Kind == client.LogEventEnd, fmt.Sprint(len(evs), " events")
	})
	page, err := c.GetOperationLog(ctx, ch.Rollout, 0, 0)
	if err != nil || !page.Final {
		t.Fatalf("the log's page: %+v %v", page, err)
	}
	var entries []client.LogEntry
	for i, ev := range evs[:len(evs)-1] {
		switch ev.Kind {
		case client.LogEventEntry:
			if ev.Index != len(entries) {
				t.Fatalf("event %d: entry index %d, want %d", i, ev.Index, len(entries))
			}
			entries = append(entries, ev.Entry)
		case client.LogEventStatus:
			if ev.Status == "" {
				t.Fatalf("event %d: a status event without a status", i)
			}
		default:
			t.Fatalf("event %d: %+v before the end", i, ev)
		}
	}
	end := evs[len(evs)-1]
	if !aborted || end.Status != "aborted" {
		t.Fatalf("the stream ended %+v; aborted by the test: %t", end, aborted)
	}
	if len(entries) == 0 || len(entries) != len(page.Entries) || end.Status != page.Status || end.Next != page.Next {
		t.Fatalf("streamed %d entries and %+v; the page has %d, status %s, next %d", len(entries), end, len(page.Entries), page.Status, page.Next)
	}
	for i := range entries {
		if entries[i].String() != page.Entries[i].String() {
			t.Fatalf("entry %d: streamed %q, paged %q", i, entries[i].String(), page.Entries[i].String())
		}
	}
	if e := page.Entries[0]; !strings.HasPrefix(e.String(), e.At.UTC().Format(time.RFC3339)+" ") || !strings.Contains(e.String(), " "+e.Outcome) {
		t.Fatalf("an entry as a line: %q (%+v)", e.String(), e)
	}

	// from an index: what follows it, then the end
	rest, err := follow(ctx, c, ch.Rollout, 1)
	if err != nil || len(rest) == 0 || rest[0].Kind != client.LogEventEntry || rest[0].Index != 1 || rest[len(rest)-1].Kind != client.LogEventEnd {
		t.Fatalf("from entry 1: %+v %v", rest, err)
	}
	// a loop that breaks early closes the stream
	n := 0
	for _, err := range c.FollowOperationLog(ctx, ch.Rollout, 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d events before the break", n)
	}

	// an error answer before the stream is a problem
	_, err = follow(ctx, c, "ro-"+strings.Repeat("0", 26), 0)
	if !client.IsNotFound(err) {
		t.Fatalf("a missing operation: %#v", err)
	}
	if _, err := follow(ctx, c.InOrg("globex"), ch.Rollout, 0); !client.IsNotFound(err) {
		t.Fatalf("another organization's operation: %v", err)
	}
}

// TestGetRaw reads answers as the gateway wrote them, with their query.
func TestGetRaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newOrg(t, "raw")
	b, err := c.GetRaw(ctx, "/api/v1/orgs/raw")
	if err != nil || !strings.Contains(string(b), `"id":"raw"`) {
		t.Fatalf("the organization: %s %v", b, err)
	}
	b, err = c.GetRaw(ctx, "/api/v1/orgs/raw/tokens?limit=1")
	if err != nil || !strings.Contains(string(b), `"items":[{`) || strings.Count(string(b), `"kind":`) != 1 {
		t.Fatalf("one token: %s %v", b, err)
	}
	if _, err := c.GetRaw(ctx, "/api/v1/orgs/raw/tokens?limit=0"); !client.IsValidation(err) {
		t.Fatalf("a bad limit: %v", err)
	}
	if _, err := c.GetRaw(ctx, "/api/v1/orgs/raw/machines/4c4c4544-0035-4b10-8056-000000000063"); !client.IsNotFound(err) {
		t.Fatalf("a missing machine: %v", err)
	}
	if _, err := c.GetRaw(ctx, "api/v1/orgs/raw"); err == nil || !strings.Contains(err.Error(), "must start with /") {
		t.Fatalf("a relative path: %v", err)
	}
}
