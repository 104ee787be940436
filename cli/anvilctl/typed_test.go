package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/client"
)

// Manifests are read into the client's request types as strictly as the
// API reads a body: an unknown field anywhere, or a value of the wrong
// type, is an error naming it.
func TestManifestsReadStrictly(t *testing.T) {
	ms, err := parseManifests("f.yaml", []byte("kind: Pool\nname: workers\ncluster: prod\nkubernetes: {minor: \"1.34\"}\n"+
		"rollout: {max_unavailable: 1, drain_timeout: 20m}\nnode_labels: {tier: web}\n---\n"+
		"kind: Machine\nuuid: 4C4C4544-0035-4B10-8056-000000000001\nhostname: w1\nupgrade_index: 3\npool: workers\n---\n"+
		"kind: Cluster\nname: prod\napi_endpoint: https://api:6443\nkubeconfig: x\n"))
	if err != nil || len(ms) != 3 {
		t.Fatalf("%+v %v", ms, err)
	}
	p, ok := ms[0].Request.(*client.PoolCreate)
	if !ok || p.Name != "workers" || p.Cluster != "prod" || p.Kubernetes.Minor != "1.34" || p.Rollout.MaxUnavailable != "1" ||
		p.Rollout.DrainTimeout != "20m" || p.NodeLabels["tier"] != "web" {
		t.Errorf("pool: %+v", ms[0].Request)
	}
	m, ok := ms[1].Request.(*client.MachinePreregister)
	if !ok || m.UUID != "4c4c4544-0035-4b10-8056-000000000001" || m.Hostname != "w1" || m.UpgradeIndex != 3 || m.Pool != "workers" {
		t.Errorf("machine: %+v", ms[1].Request)
	}
	if c, ok := ms[2].Request.(*client.ClusterCreate); !ok || c.APIEndpoint != "https://api:6443" || c.Kubeconfig != "x" {
		t.Errorf("cluster: %+v", ms[2].Request)
	}
	for _, c := range []struct{ in, want string }{
		{"kind: Pool\nname: p\ndiplay_name: x\n", `f.yaml (document 1): unknown field "diplay_name": a Pool has name, cluster, display_name, kubernetes,`},
		{"kind: Pool\nname: p\nDisplay_Name: x\n", `unknown field "Display_Name"`},
		{"kind: Pool\nname: p\nrollout: {drain_timout: 1m}\n", `f.yaml (document 1): unknown field "rollout.drain_timout"`},
		{"kind: Pool\nname: p\nnetwork: {interfaces: [{name: a}, {name: b, mtux: 1}]}\n", `unknown field "network.interfaces[1].mtux"`},
		{"kind: Pool\nname: p\nkubernetes: {minor: 1.34}\n", "f.yaml (document 1): kubernetes.minor: must be string, not number"},
		{"kind: Machine\nuuid: U\nfoo: 1\n", `unknown field "foo": a Machine has uuid, hostname, labels, pool, upgrade_index, control_plane`},
		{"kind: Machine\nuuid: U\nupgrade_index: \"3\"\n", "upgrade_index: must be int, not string"},
		{"kind: Cluster\nname: c\nkubeconfig: [1]\n", "kubeconfig: must be string, not array"},
		{"kind: List\nitems:\n- kind: Cluster\n  name: a\n  pools: 3\n", `(document 1), item 1: unknown field "pools"`},
	} {
		if _, err := parseManifests("f.yaml", []byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}

// apiErr is the one place the client's errors become anvilctl's.
func TestAPIErrors(t *testing.T) {
	p := &client.Problem{Type: "https://anvil.dev/problems/validation", Title: "Unprocessable Entity", Status: 422, Detail: "validation failed",
		Errors: []client.FieldError{{Field: "pool", Reason: "is required"}}, Method: "POST", Path: "/api/v1/orgs/acme/rollouts"}
	err := fmt.Errorf("rollout/x: %w", apiErr(p))
	if err.Error() != "rollout/x: 422 Unprocessable Entity: validation failed\n  pool: is required" {
		t.Errorf("a problem: %q", err)
	}
	if got, ok := client.AsProblem(err); !ok || got != p || !isStatus(err, 422) || !client.IsValidation(err) {
		t.Errorf("the problem is not in the chain: %v", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 422 {
		t.Errorf("no *APIError: %v", err)
	}
	// a problem without a title is titled by its status
	if got := apiErr(&client.Problem{Status: 503}).Error(); got != "503 Service Unavailable" {
		t.Errorf("no title: %q", got)
	}
	if !transient(apiErr(&client.Problem{Status: 503})) || transient(apiErr(&client.Problem{Status: 404})) {
		t.Error("transient")
	}
	// no answer: the transport's error as it is, the context's end kept
	ue := &url.Error{Op: "Get", URL: "http://127.0.0.1:1/api/v1/orgs/acme/machines", Err: context.Canceled}
	got := apiErr(fmt.Errorf("client: GET /api/v1/orgs/acme/machines: %w", ue))
	if got != error(ue) || ExitCode(got) != ExitInterrupted {
		t.Errorf("a transport error: %v (exit %d)", got, ExitCode(got))
	}
	if apiErr(nil) != nil {
		t.Error("nil")
	}
}

// readList follows next page by page, asks for no more than --limit, and
// says when items remain.
func TestReadList(t *testing.T) {
	// 7 items, pages as the server cuts them
	page := func(asked *[]client.ListOptions) func(client.ListOptions) (*client.Page[client.Org], error) {
		return func(lo client.ListOptions) (*client.Page[client.Org], error) {
			*asked = append(*asked, lo)
			start := 0
			if lo.Cursor != "" {
				start, _ = strconv.Atoi(lo.Cursor)
			}
			end := min(start+lo.Limit, 7)
			p := &client.Page[client.Org]{}
			for i := start; i < end; i++ {
				p.Items = append(p.Items, client.Org{ID: fmt.Sprint("o", i)})
			}
			if end < 7 {
				p.Next = strconv.Itoa(end)
			}
			return p, nil
		}
	}
	ids := func(items []map[string]any) string {
		var out []string
		for _, it := range items {
			out = append(out, str(it["id"]))
		}
		return strings.Join(out, ",")
	}
	var asked []client.ListOptions
	items, more, err := readList(listing{chunk: 3}, page(&asked))
	if err != nil || more || ids(items) != "o0,o1,o2,o3,o4,o5,o6" || len(asked) != 3 || asked[2].Cursor != "6" {
		t.Errorf("every page: %s %v %v %+v", ids(items), more, err, asked)
	}
	asked = nil
	items, more, err = readList(listing{limit: 4, chunk: 3}, page(&asked))
	if err != nil || !more || ids(items) != "o0,o1,o2,o3" || len(asked) != 2 || asked[1].Limit != 1 {
		t.Errorf("--limit 4: %s %v %v %+v", ids(items), more, err, asked)
	}
	asked = nil
	if items, more, err = readList(listing{limit: 7}, page(&asked)); err != nil || more || len(items) != 7 {
		t.Errorf("--limit 7 of 7: %d %v %v", len(items), more, err)
	}
	// a server that ignores the cursor answers the first page again
	_, _, err = readList(listing{chunk: 2}, func(client.ListOptions) (*client.Page[client.Org], error) {
		return &client.Page[client.Org]{Items: []client.Org{{ID: "a"}}, Next: "x"}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "the same page again") {
		t.Errorf("the same page again: %v", err)
	}
	// an error is the API's
	_, _, err = readList(listing{}, func(client.ListOptions) (*client.Page[client.Org], error) { return nil, &client.Problem{Status: 403} })
	if !isStatus(err, 403) || !strings.HasPrefix(err.Error(), "403 Forbidden") {
		t.Errorf("an error: %v", err)
	}
}
