// Package ports is the gateway's HTTP API: go-kit endpoints behind go-kit's
// HTTP transport, wrapped in svc.InstrumentHTTP, on one declarative route table that
// also produces the OpenAPI document.
package ports

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/kit/endpoint"
	httptransport "github.com/go-kit/kit/transport/http"
	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	"github.com/anvil-fleet/anvil/services/gateway/adapters"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
	regapi "github.com/anvil-fleet/anvil/services/registry/api"
	rev "github.com/anvil-fleet/anvil/services/revisions/api"
	rolloutapi "github.com/anvil-fleet/anvil/services/rollout/api"
)

// Deps is what the HTTP API talks to.
type Deps struct {
	NC             *nats.Conn
	Registry       regapi.Client
	Store          events.Store
	Idempotency    *adapters.Idempotency // nil disables Idempotency-Key
	AdminTokenHash string                // hex SHA-256 of the bootstrap admin token
	BodyLimit      int64
	Health         *svc.Health
	Log            *slog.Logger
	// TokenCacheTTL is how long a verified API token is trusted without
	// asking the registry again (0: no cache); any event of an
	// organization aggregate (a revocation) empties the cache at once.
	TokenCacheTTL time.Duration
	// LogWait is how long one long poll of an operation's log waits for a
	// new entry while a Server-Sent Events stream is open (default 15s,
	// at most rolloutapi.MaxLogWait).
	LogWait time.Duration
	// ReadCacheBytes and ReadCacheMaxAge size the cache of the registry's
	// machine and machine-page answers (see readCache; 0 for either: no
	// cache).
	ReadCacheBytes  int
	ReadCacheMaxAge time.Duration
}

type handler struct {
	writes writeMarks
	Deps
	log    *slog.Logger
	routes []route
	tokens *tokenCache
	reads  *readCache // nil: every read asks the registry
	// adminSum is AdminTokenHash decoded, so that a request's token is
	// hashed once, for this comparison and the cache's key alike; nil: no
	// bootstrap admin (or a hash that is not lower-case hex, which never
	// matched).
	adminSum []byte
}

// route is one operation of the API.
type route struct {
	Method, Path string
	Min          domain.Role // the role it needs; RoleNone: no authentication
	Summary      string
	Request      any // zero value of the JSON body, for the OpenAPI document; nil: none
	Response     any // zero value of the JSON answer
	Status       int // success status
	Query        []string
	NotInBody    []string // request fields filled from the path, headers or query
	Endpoint     endpoint.Endpoint
	Decode       httptransport.DecodeRequestFunc
	// Encode, if set, replaces the JSON encoder (the log's event stream).
	Encode httptransport.EncodeResponseFunc
	// BodyOptional: the request body may be absent.
	BodyOptional bool
	// Conditional: the route honours If-Match (documented for PATCH, DELETE
	// and machine actions without it).
	Conditional bool
	// Stream documents an alternative text/event-stream answer.
	Stream bool
	// Limit is a list's ?limit= (default and maximum), for the document.
	Limit pageLimits
}

// versioned answers carry an ETag.
type versioned interface{ ETagVersion() uint64 }

// etagVersion is the answer's version: from ETagVersion, or else a
// top-level uint64 field named Version (the services' replies).
func etagVersion(resp any) uint64 {
	if v, ok := resp.(versioned); ok {
		return v.ETagVersion()
	}
	rv := reflect.ValueOf(resp)
	if rv.Kind() == reflect.Struct {
		if f := rv.FieldByName("Version"); f.IsValid() && f.Kind() == reflect.Uint64 {
			return f.Uint()
		}
	}
	return 0
}

type ctxKey int

const (
	principalKey ctxKey = iota
	pathKey
)

func principalOf(ctx context.Context) domain.Principal {
	p, _ := ctx.Value(principalKey).(domain.Principal)
	return p
}

func requestPath(ctx context.Context) string {
	s, _ := ctx.Value(pathKey).(string)
	return s
}

// NewHandler returns the gateway's HTTP handler.
func NewHandler(d Deps) http.Handler {
	if d.BodyLimit <= 0 {
		d.BodyLimit = 1 << 20
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.LogWait <= 0 || d.LogWait > rolloutapi.MaxLogWait {
		d.LogWait = 15 * time.Second
	}
	h := &handler{Deps: d, log: d.Log, tokens: newTokenCache(d.NC, d.TokenCacheTTL),
		reads: newReadCache(d.NC, d.ReadCacheBytes, d.ReadCacheMaxAge, d.Log)}
	if sum, err := hex.DecodeString(d.AdminTokenHash); err == nil && len(sum) == sha256.Size && hex.EncodeToString(sum) == d.AdminTokenHash {
		h.adminSum = sum
	}
	h.routes = append(h.routes, h.registryRoutes()...)
	h.routes = append(h.routes, h.eventRoutes()...)
	h.routes = append(h.routes, h.revisionRoutes()...)
	h.routes = append(h.routes, h.rolloutRoutes()...)
	h.routes = append(h.routes, h.bootRoutes()...)
	h.routes = append(h.routes, h.catalogRoutes()...)
	h.routes = append(h.routes, h.versionRoutes()...)

	mux := http.NewServeMux()
	for _, rt := range h.routes {
		enc := h.encoder(rt)
		if rt.Encode != nil {
			enc = rt.Encode
		}
		srv := httptransport.NewServer(rt.Endpoint, rt.Decode, enc,
			httptransport.ServerErrorEncoder(h.encodeError),
			httptransport.ServerBefore(func(ctx context.Context, r *http.Request) context.Context {
				return context.WithValue(ctx, pathKey, r.URL.Path)
			}),
		)
		var hh http.Handler = srv
		if rt.Method == http.MethodPost && d.Idempotency != nil {
			hh = h.idempotent(hh)
		}
		mux.Handle(rt.Method+" "+rt.Path, h.authenticate(rt, hh))
	}
	doc := openAPI(h.routes)
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	if d.Health != nil {
		d.Health.Mux(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A path that exists under other methods answers 405 with Allow
		// (the catch-all pattern would otherwise match every method).
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, Problem{Type: errs.ProblemType("method_not_allowed"), Title: http.StatusText(http.StatusMethodNotAllowed),
				Status: http.StatusMethodNotAllowed, Detail: fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, strings.Join(allow, ", ")),
				Instance: r.URL.Path})
			return
		}
		writeProblem(w, problemOf(errs.NotFound("no route %s %s", r.Method, r.URL.Path), r.URL.Path))
	})
	return svc.InstrumentHTTP("gateway", traceHeaders(refuseOversized(d.BodyLimit, mux)))
}

// authenticate resolves the bearer token, checks the route's role and
// organization, and puts the principal and its actor into the context.
func (h *handler) authenticate(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.Min == domain.RoleNone {
			next.ServeHTTP(w, r)
			return
		}
		p, err := h.principal(r)
		if err == nil {
			err = domain.Authorize(p, r.PathValue("org"), rt.Min)
		}
		if err != nil {
			if errs.Is(err, errs.KindUnauthorized) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="anvil"`)
			}
			writeProblem(w, problemOf(err, r.URL.Path))
			return
		}
		ctx := context.WithValue(r.Context(), principalKey, p)
		ctx = events.WithActor(ctx, p.Actor())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (h *handler) principal(r *http.Request) (domain.Principal, error) {
	auth := r.Header.Get("Authorization")
	presented, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || presented == "" {
		return domain.Principal{}, errs.Unauthorized("an Authorization: Bearer <token> header is required")
	}
	sum := sha256.Sum256([]byte(presented))
	if h.adminSum != nil && subtle.ConstantTimeCompare(sum[:], h.adminSum) == 1 {
		return domain.Principal{TokenID: "bootstrap-admin", Role: domain.RolePlatform}, nil
	}
	if p, ok := h.tokens.get(sum); ok {
		return p, nil
	}
	p, err := h.Registry.VerifyToken(r.Context(), regapi.TokenVerify{Token: presented, Kind: regapi.KindAPI})
	if err != nil {
		if errs.Is(err, errs.KindUnavailable) {
			return domain.Principal{}, err
		}
		return domain.Principal{}, errs.Unauthorized("the token is not valid")
	}
	pr := domain.Principal{Org: p.Org, TokenID: p.TokenID, Name: p.Name, Role: p.Role}
	h.tokens.put(sum, pr)
	return pr, nil
}

func (h *handler) encoder(rt route) httptransport.EncodeResponseFunc {
	return func(ctx context.Context, w http.ResponseWriter, resp any) error {
		if v := etagVersion(resp); v > 0 {
			w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(v, 10)))
		}
		if pc, ok := resp.(rev.PoolChange); ok && pc.Rollout != "" {
			// An apply answers where to follow the rollout it started.
			w.Header().Set("Location", "/api/v1/orgs/"+pc.Pool.Org+"/rollouts/"+pc.Rollout)
		}
		if rt.Status == http.StatusNoContent {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		w.Header().Set("Content-Type", "application/json")
		if raw, ok := resp.(rawJSON); ok {
			w.Header().Set("Content-Length", strconv.Itoa(len(raw.body)+1))
			w.WriteHeader(rt.Status)
			if _, err := w.Write(raw.body); err != nil {
				return err
			}
			_, err := w.Write(newline)
			return err
		}
		w.WriteHeader(rt.Status)
		return json.NewEncoder(w).Encode(resp)
	}
}

// refuseOversized answers 413 at once to a request that announces a body
// over the limit, before anything reads it: so a client sending
// "Expect: 100-continue" gets no "100 Continue" for a body that would be
// refused anyway.
func refuseOversized(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			writeProblem(w, Problem{Type: errs.ProblemType("too_large"), Title: http.StatusText(http.StatusRequestEntityTooLarge),
				Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("the body announces %d bytes; at most %d are accepted", r.ContentLength, limit),
				Instance: r.URL.Path})
			return
		}
		next.ServeHTTP(w, r)
	})
}
