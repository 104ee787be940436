package adapters

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// kubeRequestDuration times the rollout service's calls to workload
// clusters' API servers, as the client sees them: a step that waits on a
// busy control plane shows here, not only in the step's duration.
var kubeRequestDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
	Name: "anvil_rollout_kube_request_duration_seconds",
	Help: "Seconds from sending a request to a workload cluster's API server to its answer's headers, by verb " +
		"(get, list, create, update, patch, delete), resource (nodes, nodes/status, pods, pods/eviction, …) and code " +
		"(the HTTP status, or error); watches are not timed, client-side rate limiting is not included.",
	Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
}, []string{"verb", "resource", "code"})

// timedTransport observes every request but watches in
// kubeRequestDuration.
type timedTransport struct{ next http.RoundTripper }

// WrappedRoundTripper lets client-go reach the transport underneath (to
// cancel a request that timed out).
func (t timedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	verb, resource := kubeRequestKind(r.Method, r.URL)
	if verb == "watch" {
		return t.next.RoundTrip(r)
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	kubeRequestDuration.WithLabelValues(verb, resource, code).Observe(time.Since(start).Seconds())
	return resp, err
}

// kubeRequestKind names a Kubernetes API request as the API server's own
// metrics do: its verb (a GET of a collection is a list, or a watch) and
// its resource with its subresource ("nodes/status"). A path outside the
// resource API (discovery, /version) is resource "other".
func kubeRequestKind(method string, u *url.URL) (verb, resource string) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:] // api/v1/...
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:] // apis/<group>/<version>/...
	default:
		return strings.ToLower(method), "other"
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource, not a namespace
	}
	resource = parts[0]
	named := len(parts) > 1
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	switch method {
	case http.MethodGet:
		switch {
		case named:
			verb = "get"
		case u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1":
			verb = "watch"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb, resource
}
