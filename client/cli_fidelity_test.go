package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/client"
	"github.com/anvil-fleet/anvil/libs/events/eventstest"
)

// lastBody is a transport that keeps the body of the last answer.
type lastBody struct {
	mu   sync.Mutex
	body []byte
	req  string
}

func (l *lastBody) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.body, l.req = b, r.Method+" "+r.URL.Path
	l.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(b))
	return res, nil
}

func (l *lastBody) last() ([]byte, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.body, l.req
}

// jsonDiffs lists where two decoded JSON values differ, by path.
func jsonDiffs(path string, a, b any, out *[]string) {
	if am, ok := a.(map[string]any); ok {
		if bm, ok := b.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for k := range keys {
				jsonDiffs(path+"."+k, am[k], bm[k], out)
			}
			return
		}
	}
	if al, ok := a.([]any); ok {
		if bl, ok := b.([]any); ok && len(al) == len(bl) {
			for i := range al {
				jsonDiffs(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		*out = append(*out, fmt.Sprintf("%s: the gateway sent %s, the client's type keeps %s", path, ja, jb))
	}
}

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

// TestAnswersSurviveTheTypes: anvilctl prints the client's typed answers
// re-encoded as JSON (-o json, yaml, jsonpath, custom-columns), so every
// answer it prints must re-encode to exactly what the gateway sent: no
// field the types lack, none that omitempty drops or adds, times and
// numbers spelt alike.
func TestAnswersSurviveTheTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newOrg(t, "fidelity")
	issued, err := admin.CreateToken(ctx, client.TokenCreate{Name: "recorded", Role: client.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	rec := &lastBody{}
	c, err := client.New(client.Options{BaseURL: gateway, Token: issued.Token, Org: "fidelity", HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	eventstest.Eventually(t, "the new token works", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, err := c.GetOrg(ctx)
		return err == nil, fmt.Sprint(err)
	})
	var diffs []string
	check := func(v any, err error) {
		t.Helper()
		body, req := rec.last()
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		typed, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var d []string
		jsonDiffs("", decodeNumbers(t, body), decodeNumbers(t, typed), &d)
		for _, x := range d {
			diffs = append(diffs, req+" "+x)
		}
	}

	check(c.Version(ctx))
	check(c.GetOrg(ctx))
	check(c.ListOrgs(ctx, client.ListOptions{}))
	check(c.GetCatalog(ctx))
	check(c.CreateToken(ctx, client.TokenCreate{Name: "v", Role: client.RoleViewer, ExpiresAt: time.Now().Add(time.Hour).Truncate(time.Second)}))
	enroll, err := c.CreateEnrollmentToken(ctx, client.EnrollmentTokenCreate{Name: "e", MaxMachines: 3})
	check(enroll, err)
	check(c.ListTokens(ctx, client.ListOptions{}))
	check(c.ListEnrollmentTokens(ctx, client.ListOptions{}))
	check(c.RevokeEnrollmentToken(ctx, enroll.Info.ID))

	check(c.CreateCluster(ctx, client.ClusterCreate{Name: "prod", APIEndpoint: "https://api.prod.example:6443", KubernetesVersion: kubernetesVersion,
		Kubeconfig: kubeconfig, BootstrapToken: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("ab", 32)}))
	check(c.GetCluster(ctx, "prod"))
	check(c.ListClusters(ctx, client.ListOptions{}))
	ep := "https://api2.prod.example:6443"
	check(c.UpdateCluster(ctx, "prod", client.ClusterPatch{APIEndpoint: &ep}))

	spec := client.PoolSpec{DisplayName: "Workers", PoolConfig: client.PoolConfig{
		Kubernetes: client.Kubernetes{Minor: "1.33"}, Flatcar: client.Flatcar{Channel: "stable", Version: "4230.2.3"}},
		Rollout: client.PoolRollout{MaxUnavailable: "25%", DrainTimeout: "20m"}}
	check(c.CreatePool(ctx, client.PoolCreate{Name: "workers", Cluster: "prod", PoolSpec: spec}))
	spec.NodeLabels = map[string]string{"tier": "web"}
	spec.Taints = []client.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
	ch, err := c.UpdatePool(ctx, "workers", client.PoolUpdate{PoolSpec: spec, Message: "label and taint", Apply: true})
	check(ch, err)
	check(c.GetPool(ctx, "workers"))
	check(c.ListPools(ctx, client.PoolFilter{}))
	check(c.ListPoolRevisions(ctx, "workers", client.ListOptions{}))
	check(c.GetPoolRevision(ctx, "workers", 2))

	check(c.PreregisterMachine(ctx, client.MachinePreregister{UUID: uuidN(201), Hostname: "f1", Pool: "workers",
		Labels: map[string]string{"rack": "r1"}, UpgradeIndex: 2}))
	check(c.PreregisterMachine(ctx, client.MachinePreregister{UUID: uuidN(202)}))
	check(c.GetMachine(ctx, uuidN(201)))
	check(c.GetMachine(ctx, uuidN(202)))
	check(c.ListMachines(ctx, client.MachineFilter{}))
	check(c.GetMachineRevisions(ctx, uuidN(201)))
	host := "f1b"
	check(c.UpdateMachine(ctx, uuidN(201), client.MachinePatch{Hostname: &host}))
	check(c.DeleteMachine(ctx, uuidN(202), client.DeleteForced))

	// the rollout the apply started, once the rollout service has it
	eventstest.Eventually(t, "the rollout exists", 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, err := c.GetRollout(ctx, ch.Rollout)
		return err == nil, fmt.Sprint(err)
	})
	check(c.GetRollout(ctx, ch.Rollout))
	check(c.ListRollouts(ctx, client.RolloutFilter{}))
	check(c.GetOperation(ctx, ch.Rollout))
	check(c.ListOperations(ctx, client.OperationFilter{}))
	check(c.GetOperationLog(ctx, ch.Rollout, 0, 0))
	check(c.ListEvents(ctx, client.EventFilter{}))

	sort.Strings(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}
