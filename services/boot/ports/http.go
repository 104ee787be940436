// Package ports serves the boot service: the machine-facing HTTP surface
// (iPXE scripts, Ignition, the agent API, static assets), the NATS queries
// and the event handlers.
package ports

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentapi "github.com/anvil-fleet/anvil/agent/api"
	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/libs/events/svc"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
	"github.com/anvil-fleet/anvil/services/boot/domain/ipxe"
)

// Limits of the HTTP surface.
const (
	// MaxAgentBody bounds an agent request body (a report is at most 200
	// log lines of 2 KiB plus the inventory).
	MaxAgentBody = 4 << 20
	// DefaultPollWait is the long-poll wait when the agent sends none.
	DefaultPollWait = 30 * time.Second
	// ignitionType is Ignition's media type.
	ignitionType = "application/vnd.coreos.ignition+json"
	scriptType   = "text/plain; charset=utf-8"
	problemType  = "application/problem+json"
)

// HTTPOptions configure one listener's handler.
type HTTPOptions struct {
	// PublicURL is the boot service's base URL as firmware reaches it;
	// empty derives it from each request's Host header.
	PublicURL string
	// TLS says whether this handler serves the TLS listener.
	TLS bool
	// TLSConfigured says whether a TLS listener exists; then Ignition URLs
	// point at it (TLSPublicURL, or the request's host with TLSPort).
	TLSConfigured bool
	TLSPublicURL  string
	TLSPort       string
	// PlainSecrets lets the plain listener serve /ignition and the agent
	// API although a TLS listener exists.
	PlainSecrets bool
	Health       *svc.Health
	Log          *slog.Logger
}

type server struct {
	app *app.App
	o   HTTPOptions
	log *slog.Logger
	// lastBase is the last base URL a request's Host made that passed
	// CheckBaseURL: firmware asks with the same Host, so it is checked
	// (and built) once.
	lastBase atomic.Pointer[checkedBase]
}

// checkedBase is a base URL that passed CheckBaseURL, and what made it.
type checkedBase struct {
	host string
	tls  bool
	url  string
}

// NewHTTP returns the handler of one listener: every request in a server
// span and in the request metric (svc.InstrumentHTTP).
func NewHTTP(a *app.App, o HTTPOptions) http.Handler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &server{app: a, o: o, log: o.Log}
	mux := http.NewServeMux()
	if o.Health != nil {
		o.Health.Mux(mux)
	}
	// Firmware endpoints answer any method: a script is always the answer.
	chain, machine := s.script("/boot.ipxe", a.ChainScript), s.script("/ipxe", a.MachineScript)
	mux.HandleFunc("/boot.ipxe", chain)
	mux.HandleFunc("/ipxe", machine)
	mux.HandleFunc("GET /ignition", s.secret(s.ignition))
	mux.HandleFunc("POST /agent/v1/machines/{uuid}/heartbeat", s.secret(s.agent(s.heartbeat)))
	mux.HandleFunc("POST /agent/v1/machines/{uuid}/report", s.secret(s.agent(s.report)))
	mux.HandleFunc("GET /agent/v1/machines/{uuid}/instructions", s.secret(s.agent(s.instructions)))
	mux.HandleFunc("POST /agent/v1/machines/{uuid}/instructions/{id}/ack", s.secret(s.agent(s.ack)))
	mux.HandleFunc("/agent/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "no such agent API call", nil)
	})
	// The files machines fetch, from the asset index (only names that
	// api.ParseAsset accepts; no listings).
	for _, dir := range []string{bootapi.AgentDir, bootapi.SysextDir, bootapi.FlatcarDir} {
		mux.HandleFunc("GET /"+dir+"/", s.asset)
	}
	// Every request is served in a span, the iPXE scripts included: a
	// boot that registers a machine is traced from firmware to registry.
	return svc.InstrumentHTTP("boot", accessLog(s.log, recoverer(s.log, firmwareFirst(mux, chain, machine))))
}

// firmwareFirst routes the exact paths of the firmware endpoints before
// mux, as mux would (their patterns take any method and have no
// wildcards), setting the pattern mux sets, which names the span and
// labels the metric. Every boot of a rack asks for them, and mux tries
// the method patterns first, which cost about a tenth of the handler
// chain for a known machine; any other path (an unclean one included)
// goes to mux.
func firmwareFirst(mux *http.ServeMux, chain, machine http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect { // mux reads a CONNECT's path as it is
			switch r.URL.Path {
			case "/ipxe":
				r.Pattern = "/ipxe"
				machine(w, r)
				return
			case "/boot.ipxe":
				r.Pattern = "/boot.ipxe"
				chain(w, r)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// ---- iPXE ----

// The iPXE answers' header values, shared (never modified): a rack asks
// for scripts at once, and Header.Set would allocate them per request.
var (
	scriptTypeHeader = []string{scriptType}
	noStoreHeader    = []string{"no-store"}
)

// scriptBufs hold the scratch space boot scripts are built in (a script
// is about 1.2 KiB; one that outgrows it gets its own): Write copies the
// answer, so the buffer serves the next request.
var scriptBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// script serves an iPXE endpoint: always 200 and a script, whatever
// happened, including a panic.
func (s *server) script(endpoint string, fn func(context.Context, app.ScriptRequest) app.Script) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		buf := scriptBufs.Get().(*[]byte)
		defer scriptBufs.Put(buf)
		req := app.ScriptRequest{RawQuery: r.URL.RawQuery, Base: s.baseURL(r), Buf: (*buf)[:0]}
		req.IgnitionBase = s.ignitionBase(r, req.Base)
		var sc app.Script
		func() {
			defer func() {
				if p := recover(); p != nil {
					s.log.ErrorContext(r.Context(), "iPXE handler panicked", "endpoint", endpoint, "panic", p, "stack", string(debug.Stack()))
					sc = s.app.Internal(r.Context(), endpoint, req, p)
				}
			}()
			sc = fn(r.Context(), req)
		}()
		h := w.Header()
		h["Content-Type"], h["Cache-Control"] = scriptTypeHeader, noStoreHeader
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(sc.Body)
	}
}

// baseURL is the configured public URL, or the one the request reached:
// its scheme and Host header if they form a safe URL, else the local
// address it arrived on.
func (s *server) baseURL(r *http.Request) string {
	if s.o.PublicURL != "" {
		return s.o.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if last := s.lastBase.Load(); last != nil && last.host == r.Host && last.tls == (r.TLS != nil) {
		return last.url
	}
	u := scheme + "://" + r.Host
	if r.Host != "" && ipxe.CheckBaseURL(u) == nil {
		s.lastBase.Store(&checkedBase{host: r.Host, tls: r.TLS != nil, url: u})
		return u
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return scheme + "://" + a.String()
	}
	return scheme + "://127.0.0.1"
}

func (s *server) ignitionBase(r *http.Request, base string) string {
	if !s.o.TLSConfigured || r.TLS != nil {
		return base
	}
	if s.o.TLSPublicURL != "" {
		return s.o.TLSPublicURL
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if u := "https://" + host + ":" + s.o.TLSPort; ipxe.CheckBaseURL(u) == nil {
		return u
	}
	return base
}

// ---- Ignition and the agent API: secrets ----

// secret refuses requests for join material and credentials on the plain
// listener when a TLS listener exists (unless allowed).
func (s *server) secret(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.o.TLSConfigured && !s.o.TLS && !s.o.PlainSecrets {
			writeProblem(w, http.StatusForbidden, "this boot service serves Ignition and the agent API over HTTPS only", nil)
			return
		}
		h(w, r)
	}
}

func (s *server) ignition(w http.ResponseWriter, r *http.Request) {
	cfg, err := s.app.Ignition(r.Context(), r.URL.RawQuery)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", ignitionType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(cfg)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(cfg)
}

type agentHandler func(w http.ResponseWriter, r *http.Request, ag app.Agent)

func (s *server) agent(h agentHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ag, err := s.app.Authenticate(r.Context(), r.PathValue("uuid"), r.Header.Get("Authorization"))
		if err != nil {
			writeError(w, err)
			return
		}
		h(w, r, ag)
	}
}

func (s *server) heartbeat(w http.ResponseWriter, r *http.Request, ag app.Agent) {
	var hb agentapi.Heartbeat
	if err := decodeBody(w, r, &hb); err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, s.app.Heartbeat(r.Context(), ag, hb))
}

func (s *server) report(w http.ResponseWriter, r *http.Request, ag app.Agent) {
	var rep agentapi.Report
	if err := decodeBody(w, r, &rep); err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, s.app.Report(r.Context(), ag, rep))
}

func (s *server) instructions(w http.ResponseWriter, r *http.Request, ag app.Agent) {
	wait := DefaultPollWait
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, errs.Invalid("wait", "must be a number of seconds"))
			return
		}
		wait = time.Duration(min(n, 3600)) * time.Second
	}
	out, err := s.app.PollInstructions(r.Context(), ag, wait)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(out) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, agentapi.Instructions{Instructions: out})
}

func (s *server) ack(w http.ResponseWriter, r *http.Request, ag app.Agent) {
	var a agentapi.Ack
	if err := decodeBody(w, r, &a); err != nil {
		writeError(w, err)
		return
	}
	writeResult(w, s.app.AckInstruction(r.Context(), ag, r.PathValue("id"), a))
}

// decodeBody reads a JSON body of at most MaxAgentBody bytes. Unknown
// fields are ignored (a newer agent may send more); a wrong type is a
// validation error naming the field.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxAgentBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errs.Invalid("body", "is larger than %d bytes", MaxAgentBody)
		}
		return errs.Invalid("body", "could not be read: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return errs.Invalid(typeErr.Field, "must be %s, not %s", typeErr.Type, typeErr.Value)
		}
		return errs.Invalid("body", "is not valid JSON")
	}
	return nil
}

// ---- assets ----

// asset serves a file of the asset index with http.ServeContent: Range
// requests, conditional requests on the ETag (the file's sha512) and on
// the modification time, HEAD, and Content-Length. Repr-Digest (RFC 9530)
// carries the same sha512 that the rendered Ignition verifies.
func (s *server) asset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	f, err := s.app.OpenAsset(r.Context(), name)
	if err != nil {
		// The details (paths on this host, the mirror's answer) are in the
		// log and in the resolve query's reasons, not for anyone who asks.
		switch e := errs.As(err); e.Kind {
		case errs.KindNotFound:
			http.Error(w, "no such asset", http.StatusNotFound)
		case errs.KindUnavailable:
			w.Header().Set("Retry-After", "10")
			http.Error(w, "this file is being fetched from the boot service's sysext mirror, or fetching it failed; try again", http.StatusServiceUnavailable)
		default:
			s.log.ErrorContext(r.Context(), "serving an asset failed", "asset", name, "err", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
		return
	}
	defer f.Close()
	info := f.Info()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+info.Hash+`"`)
	w.Header().Set("Cache-Control", "no-cache") // revalidate: a file may be replaced
	if sum, err := hex.DecodeString(strings.TrimPrefix(info.Hash, "sha512-")); err == nil {
		w.Header().Set("Repr-Digest", "sha-512=:"+base64.StdEncoding.EncodeToString(sum)+":")
	}
	http.ServeContent(w, r, "", info.ModTime, f)
}

// ---- responses ----

func writeResult(w http.ResponseWriter, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// statusOf maps an error kind to an HTTP status, as every anvil HTTP surface does.
func statusOf(k errs.Kind) int { return errs.HTTPStatus(k) }

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string                `json:"type"`
	Title  string                `json:"title"`
	Status int                   `json:"status"`
	Detail string                `json:"detail,omitempty"`
	Errors []agentapi.FieldError `json:"errors,omitempty"`
}

func writeError(w http.ResponseWriter, err error) {
	e := errs.As(err)
	status := statusOf(e.Kind)
	switch {
	case e.RetryAfter > 0:
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	case status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
	}
	var fields []agentapi.FieldError
	for _, f := range e.Fields {
		fields = append(fields, agentapi.FieldError{Field: f.Field, Reason: f.Reason})
	}
	writeProblemKind(w, status, string(e.Kind), e.Message, fields)
}

func writeProblem(w http.ResponseWriter, status int, detail string, fields []agentapi.FieldError) {
	writeProblemKind(w, status, kindOfStatus(status), detail, fields)
}

// kindOfStatus names a status with the problem vocabulary every service
// shares (errs.ProblemType), so that the boot service's 404 is the
// gateway's "not-found".
func kindOfStatus(status int) string {
	switch status {
	case http.StatusUnprocessableEntity, http.StatusBadRequest:
		return string(errs.KindValidation)
	case http.StatusNotFound:
		return string(errs.KindNotFound)
	case http.StatusConflict:
		return string(errs.KindConflict)
	case http.StatusPreconditionFailed:
		return string(errs.KindPrecondition)
	case http.StatusForbidden:
		return string(errs.KindForbidden)
	case http.StatusUnauthorized:
		return string(errs.KindUnauthorized)
	case http.StatusServiceUnavailable:
		return string(errs.KindUnavailable)
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	}
	return string(errs.KindInternal)
}

func writeProblemKind(w http.ResponseWriter, status int, kind, detail string, fields []agentapi.FieldError) {
	w.Header().Set("Content-Type", problemType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{
		Type: errs.ProblemType(errs.Kind(kind)), Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// recoverer turns a panic outside the iPXE endpoints into a 500 problem
// and a log line with the stack.
func recoverer(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.ErrorContext(r.Context(), "HTTP handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				writeProblem(w, http.StatusInternalServerError, "internal error", nil)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// accessLog writes one line per request ("request served": method, path
// without its query — per-boot tokens and enrollment tokens travel
// there — status, bytes, duration). What machines fetch (scripts,
// Ignition, assets) and every failure log at info; the agent's routine
// successes (heartbeats, polls) at debug, as they come every few seconds
// from every machine. A 5xx logs at warn with the start of its answer (the
// problem's detail says which dependency failed), unless its client went
// away first: that logs at info with status 499 (svc.ClientClosed).
func accessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !log.Enabled(r.Context(), slog.LevelWarn) {
			// No level a request logs at is on: nothing to record.
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := statusWriters.Get().(*statusWriter)
		*sw = statusWriter{ResponseWriter: w, status: http.StatusOK, head: sw.head[:0]}
		// The server no longer lets anyone use w once ServeHTTP returned.
		defer func() { sw.ResponseWriter = nil; statusWriters.Put(sw) }()
		next.ServeHTTP(sw, r)
		level, status := slog.LevelInfo, sw.status
		switch {
		case svc.ClientClosed(r, status):
			// Nobody reads the answer, and no dependency failed.
			status = svc.StatusClientClosedRequest
		case status >= 500:
			level = slog.LevelWarn
		case status < 400 && strings.HasPrefix(r.URL.Path, "/agent/"):
			level = slog.LevelDebug
		}
		if !log.Enabled(r.Context(), level) {
			return // nothing to build the line for
		}
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", status,
			"bytes", sw.bytes, "duration_ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr}
		switch {
		case status == svc.StatusClientClosedRequest:
			attrs = append(attrs, "answered", sw.status, "why", "the client closed the request before it was answered")
		case status >= 500:
			attrs = append(attrs, "answer", strings.TrimSpace(string(sw.head)))
		}
		log.Log(r.Context(), level, "request served", attrs...)
	})
}

// statusWriters are reused: every request has one.
var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

// failureHead is how much of a 5xx answer the access log keeps.
const failureHead = 300

// statusWriter records the status and the size of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
	head   []byte // the start of a 5xx answer, for the access log
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	if w.status >= 500 && len(w.head) < failureHead {
		w.head = append(w.head, b[:min(len(b), failureHead-len(w.head))]...)
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// ReadFrom keeps the server's sendfile path for large files (sysexts,
// Flatcar images) while counting the bytes.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	w.wrote = true
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(w.ResponseWriter, r)
	}
	w.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
