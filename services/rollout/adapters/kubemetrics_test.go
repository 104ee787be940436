package adapters

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestKubeRequestKind(t *testing.T) {
	for _, c := range []struct {
		method, path   string
		verb, resource string
	}{
		{"PATCH", "/api/v1/nodes/m1", "patch", "nodes"},
		{"PATCH", "/api/v1/nodes/m1/status", "patch", "nodes/status"},
		{"GET", "/api/v1/nodes/m1", "get", "nodes"},
		{"GET", "/api/v1/nodes", "list", "nodes"},
		{"GET", "/api/v1/nodes?watch=true&resourceVersion=5", "watch", "nodes"},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dm1", "list", "pods"},
		{"POST", "/api/v1/namespaces/default/pods/p1/eviction", "create", "pods/eviction"},
		{"GET", "/apis/policy/v1/poddisruptionbudgets", "list", "poddisruptionbudgets"},
		{"GET", "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/b", "get", "poddisruptionbudgets"},
		{"GET", "/api/v1/namespaces/ns", "get", "namespaces"},
		{"DELETE", "/api/v1/nodes/m1", "delete", "nodes"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "deletecollection", "pods"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/m1", "update", "leases"},
		{"GET", "/version", "get", "other"},
		{"GET", "/apis", "get", "other"},
		{"GET", "/api/v1", "get", "other"},
	} {
		u, err := url.Parse(c.path)
		if err != nil {
			t.Fatal(err)
		}
		verb, resource := kubeRequestKind(c.method, u)
		if verb != c.verb || resource != c.resource {
			t.Errorf("%s %s: %s %s, want %s %s", c.method, c.path, verb, resource, c.verb, c.resource)
		}
	}
}

func TestTimedTransportObserves(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	count := func() uint64 {
		var m dto.Metric
		if err := kubeRequestDuration.WithLabelValues("patch", "nodes", "409").(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	was := count()
	c := &http.Client{Transport: timedTransport{next: http.DefaultTransport}}
	for _, r := range []struct{ method, path string }{
		{http.MethodPatch, "/api/v1/nodes/m1"},
		{http.MethodGet, "/api/v1/nodes?watch=true"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := count() - was; got != 1 {
		t.Fatalf("patch nodes 409 observed %d times, want 1 (the watch is not timed)", got)
	}
}
