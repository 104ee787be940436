package ports

import (
	"context"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
)

// jsonField is the field of struct v whose JSON name is name, if any.
func jsonField(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// setField sets a string, int or uint64 field by its JSON name.
func setField(v reflect.Value, jsonName string, value string) error {
	f, ok := jsonField(v, jsonName)
	if !ok {
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(value)
	case reflect.Int:
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return errs.Invalid(jsonName, "must be a positive integer")
		}
		f.SetInt(int64(n))
	case reflect.Uint64:
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return errs.Invalid(jsonName, "must be a non-negative integer")
		}
		f.SetUint(n)
	}
	return nil
}

// setMinVersion fills a read's min_version field, if it has one, with the
// caller's last write (read-your-writes, docs/api.md "Consistency"); a
// request without the field (a diff, say) is left as it is.
func setMinVersion(v reflect.Value, seq uint64) {
	if f, ok := jsonField(v, "min_version"); ok && seq > 0 && f.Kind() == reflect.Uint64 {
		f.SetUint(seq)
	}
}

// writtenVersion is the stream sequence a write's answer carries: its
// "version", or that of the resource it wraps (a PoolChange's pool).
func writtenVersion(v reflect.Value) uint64 {
	if v.Kind() != reflect.Struct {
		return 0
	}
	if f, ok := jsonField(v, "version"); ok && f.Kind() == reflect.Uint64 {
		return f.Uint()
	}
	t := v.Type()
	for i := range t.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && t.Field(i).IsExported() {
			if seq := writtenVersion(f); seq > 0 {
				return seq
			}
		}
	}
	return 0
}

// renameField reports a field error under the query parameter's name.
func renameField(err error, field, param string) error {
	if err == nil || field == param {
		return err
	}
	e := *errs.As(err)
	e.Fields = append([]errs.FieldError(nil), e.Fields...)
	for i := range e.Fields {
		if e.Fields[i].Field == field {
			e.Fields[i].Field = param
		}
	}
	return &e
}

// revRoute is a route onto the revisions service: path values fill the
// request's fields of the same JSON name ({pool} fills "pool" and, for
// pool routes, "name"), If-Match fills expected_version, ?at fills at.
func revRoute[Req, Resp any](h *handler, method, path string, min domain.Role, status int, summary string, withBody bool,
	call func(context.Context, *nats.Conn, Req) (Resp, error), params map[string]string, query ...string) route {
	var zero Req
	var queryNames []string
	for _, q := range query {
		param, _, _ := strings.Cut(q, "=")
		queryNames = append(queryNames, param)
	}
	rt := route{Method: method, Path: path, Min: min, Summary: summary, Response: *new(Resp), Status: status, Query: queryNames,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			var req Req
			if withBody {
				if err := readJSON(r, h.BodyLimit, &req); err != nil {
					return nil, err
				}
			}
			v := reflect.ValueOf(&req).Elem()
			var f errs.Fields
			for pathName, field := range params {
				f.Merge("", setField(v, field, r.PathValue(pathName)))
			}
			if expected, err := ifMatch(r); err != nil {
				f.Merge("", err)
			} else if expected > 0 {
				f.Merge("", setField(v, "expected_version", strconv.FormatUint(expected, 10)))
			}
			for _, q := range query {
				param, field, renamed := strings.Cut(q, "=") // "against=from": ?against= fills from
				if !renamed {
					field = param
				}
				if val := r.URL.Query().Get(param); val != "" {
					f.Merge("", renameField(setField(v, field, val), field, param))
				}
			}
			return req, f.Err()
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			r := req.(Req)
			if method == http.MethodGet {
				setMinVersion(reflect.ValueOf(&r).Elem(), h.writes.last(ctx, marksRevisions))
				return call(ctx, h.NC, r)
			}
			out, err := call(ctx, h.NC, r)
			if err == nil {
				h.writes.note(ctx, marksRevisions, writtenVersion(reflect.ValueOf(out)))
			}
			return out, err
		},
	}
	if withBody {
		rt.Request = zero
	}
	rt.NotInBody = []string{"expected_version", "min_version"}
	for _, q := range query {
		_, field, renamed := strings.Cut(q, "=")
		if !renamed {
			field = q
		}
		rt.NotInBody = append(rt.NotInBody, field)
	}
	for _, field := range params {
		rt.NotInBody = append(rt.NotInBody, field)
	}
	return rt
}

func (h *handler) revisionRoutes() []route {
	const (
		clusters = "/api/v1/orgs/{org}/clusters"
		cluster  = clusters + "/{name}"
		pools    = "/api/v1/orgs/{org}/pools"
		pool     = pools + "/{pool}"
		revs     = pool + "/revisions"
		one      = revs + "/{n}"
	)
	orgOnly := map[string]string{"org": "org"}
	named := map[string]string{"org": "org", "name": "name"}
	poolNamed := map[string]string{"org": "org", "pool": "name"}
	revRef := map[string]string{"org": "org", "pool": "pool", "n": "revision"}
	A, V := domain.RoleAdmin, domain.RoleViewer
	return []route{
		h.clusterList(clusters),
		revRoute(h, "POST", clusters, A, 201, "Create a cluster (its kubeconfig and bootstrap token are sealed at rest)", true, rev.CreateCluster, orgOnly),
		revRoute(h, "GET", cluster, V, 200, "Get a cluster, now or ?at= a past time or sequence", false, rev.GetCluster, named, "at"),
		revRoute(h, "PATCH", cluster, A, 200, "Change a cluster's endpoint, control-plane version or CA hash", true, rev.UpdateCluster, named),
		revRoute(h, "PUT", cluster+"/kubeconfig", A, 200, "Replace the kubeconfig used to cordon and drain", true, rev.RotateKubeconfig, named),
		revRoute(h, "PUT", cluster+"/bootstrap-token", A, 200, "Replace the join bootstrap token", true, rev.RotateBootstrapToken, named),
		revRoute(h, "DELETE", cluster, A, 200, "Delete a cluster (refused while pools remain); answers it as it was, with deleted: true", false, deleteCluster, named),

		h.poolList(pools),
		revRoute(h, "POST", pools, A, 201, `Create a pool: "Save" makes revision 1; with "apply": true ("Save & Apply") it is also rolled out`, true, rev.CreatePool, orgOnly),
		revRoute(h, "GET", pool, V, 200, "Get a pool, now or ?at= a past time or sequence", false, rev.GetPool, poolNamed, "at"),
		revRoute(h, "PUT", pool, A, 200, `Change a pool: a change that needs a reboot makes a new revision; "apply": true also rolls it out`, true, rev.UpdatePool, poolNamed),
		revRoute(h, "DELETE", pool, A, 200, "Delete a pool; answers it as it was, with deleted: true", false, deletePool, poolNamed),
		h.revisionList(revs),
		revRoute(h, "GET", one, V, 200, "Get one revision", false, rev.GetRevision, revRef),
		revRoute(h, "GET", one+"/diff", V, 200, "Diff a revision ?against= another: fields and the rendered Ignition", false,
			func(ctx context.Context, nc *nats.Conn, r rev.DiffRevisionsRequest) (rev.RevisionDiff, error) {
				return rev.DiffRevisions(ctx, nc, r)
			},
			map[string]string{"org": "org", "pool": "pool", "n": "to"}, "against=from"),
		revRoute(h, "GET", one+"/ignition", V, 200, "The revision's rendered Ignition (credentials left as placeholders)", false, rev.PreviewIgnition, revRef),
		revRoute(h, "POST", one+"/apply", domain.RoleOperator, 200, "Roll this revision out (an older one is a rollback; the current one re-reboots)", false, rev.ApplyRevision, revRef),
	}
}

// PoolPage is a page of an organization's pools, by name.
type PoolPage struct {
	Items []rev.PoolSummary `json:"items"`
	Next  string            `json:"next,omitempty"`
}

// ClusterPage is a page of an organization's clusters, by name.
type ClusterPage struct {
	Items []rev.Cluster `json:"items"`
	Next  string        `json:"next,omitempty"`
}

// RevisionPage is a page of a pool's revisions, oldest first, with the
// revision last applied.
type RevisionPage struct {
	Items           []rev.RevisionSummary `json:"items"`
	Next            string                `json:"next,omitempty"`
	Pool            string                `json:"pool"`
	AppliedRevision int                   `json:"applied_revision"`
}

// revList is a list read from the revisions service, paged here: the
// service answers the whole list.
type revList[Req any] struct {
	req  Req
	page pageQuery
}

func (h *handler) poolList(path string) route {
	return route{Method: "GET", Path: path, Min: domain.RoleViewer, Summary: "List machine pools, by name (filter: cluster; cursor pagination)",
		Response: PoolPage{}, Status: 200, Query: []string{"cluster", "cursor", "limit"}, Limit: listPage,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			q, err := readPage(r, listPage)
			return revList[rev.ListPoolsRequest]{req: rev.ListPoolsRequest{Org: r.PathValue("org"), Cluster: r.URL.Query().Get("cluster")}, page: q}, err
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			q := req.(revList[rev.ListPoolsRequest])
			q.req.MinVersion = h.writes.last(ctx, marksRevisions)
			l, err := rev.ListPools(ctx, h.NC, q.req)
			if err != nil {
				return nil, err
			}
			items, next := pageByKey(l.Pools, q.page, func(p rev.PoolSummary) string { return p.Name }, lessString)
			return PoolPage{Items: items, Next: next}, nil
		}}
}

func (h *handler) clusterList(path string) route {
	return route{Method: "GET", Path: path, Min: domain.RoleViewer, Summary: "List clusters, by name (cursor pagination)",
		Response: ClusterPage{}, Status: 200, Query: []string{"cursor", "limit"}, Limit: listPage,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			q, err := readPage(r, listPage)
			return revList[rev.ListClustersRequest]{req: rev.ListClustersRequest{Org: r.PathValue("org")}, page: q}, err
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			q := req.(revList[rev.ListClustersRequest])
			q.req.MinVersion = h.writes.last(ctx, marksRevisions)
			l, err := rev.ListClusters(ctx, h.NC, q.req)
			if err != nil {
				return nil, err
			}
			items, next := pageByKey(l.Clusters, q.page, func(c rev.Cluster) string { return c.Name }, lessString)
			return ClusterPage{Items: items, Next: next}, nil
		}}
}

func (h *handler) revisionList(path string) route {
	return route{Method: "GET", Path: path, Min: domain.RoleViewer, Summary: "List a pool's revisions, oldest first (cursor pagination)",
		Response: RevisionPage{}, Status: 200, Query: []string{"cursor", "limit"}, Limit: listPage,
		Decode: func(_ context.Context, r *http.Request) (any, error) {
			q, err := readPage(r, listPage)
			if err == nil {
				err = checkNumberCursor(q)
			}
			return revList[rev.ListRevisionsRequest]{req: rev.ListRevisionsRequest{Org: r.PathValue("org"), Pool: r.PathValue("pool")}, page: q}, err
		},
		Endpoint: func(ctx context.Context, req any) (any, error) {
			q := req.(revList[rev.ListRevisionsRequest])
			q.req.MinVersion = h.writes.last(ctx, marksRevisions)
			l, err := rev.ListRevisions(ctx, h.NC, q.req)
			if err != nil {
				return nil, err
			}
			items, next := pageByKey(l.Revisions, q.page, func(r rev.RevisionSummary) string { return strconv.Itoa(r.Number) }, lessNumber)
			return RevisionPage{Items: items, Next: next, Pool: l.Pool, AppliedRevision: l.AppliedRevision}, nil
		}}
}
