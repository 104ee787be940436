// Package ui is anvil's web console: server-rendered pages (html/template)
// served by the gateway under /ui/, with a little hand-written JavaScript
// for live updates. It has no access of its own: every page and every
// button is an in-process request to the gateway's own API handler with
// the signed-in user's token as its bearer token, so roles, organization
// isolation and validation are exactly the API's.
//
// A user signs in with an API token. The token is kept server-side in a
// JetStream key-value bucket, sealed (AES-GCM) under a key derived from the
// session id, and filed under the session id's SHA-256: the bucket alone
// reveals neither tokens nor session ids. The browser holds only the
// session id, in an HttpOnly, SameSite=Strict cookie (Secure over TLS).
// Every form carries a CSRF token derived from the session id.
package ui

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Environment variables the console reads (see docs/console.md).
const (
	// EnvBootURL is the boot service's URL as machines reach it; the
	// console builds the iPXE chain URL from it. The gateway does not
	// otherwise know where the boot service is. When it is unset, the
	// boot service's own EnvBootPublicURL is used.
	EnvBootURL = "ANVIL_CONSOLE_BOOT_URL"
	// EnvBootPublicURL is the boot service's --public-url variable, read
	// when the gateway shares the boot service's environment.
	EnvBootPublicURL = "ANVIL_BOOT_PUBLIC_URL"
	// EnvSessionTTL is how long a session lasts after sign-in (a Go
	// duration, default 12h).
	EnvSessionTTL = "ANVIL_CONSOLE_SESSION_TTL"
)

// DefaultSessionTTL is a session's lifetime when EnvSessionTTL is unset.
const DefaultSessionTTL = 12 * time.Hour

// Options configure the console.
type Options struct {
	// API is the gateway's API handler; every page calls it in-process.
	API http.Handler
	// JS holds the session bucket; Replicas is its replica count.
	JS       jetstream.JetStream
	Replicas int
	// BootURL is the boot service's URL as machines reach it (default:
	// $ANVIL_CONSOLE_BOOT_URL, else $ANVIL_BOOT_PUBLIC_URL).
	BootURL string
	// SessionTTL is a session's lifetime (default: $ANVIL_CONSOLE_SESSION_TTL,
	// else DefaultSessionTTL).
	SessionTTL time.Duration
	Log        *slog.Logger
}

// Console serves the web console.
type Console struct {
	api      http.Handler
	sessions *sessionStore
	bootURL  string
	log      *slog.Logger
	pages    *pages
	mux      *http.ServeMux
}

// New prepares the console and its session bucket.
func New(ctx context.Context, o Options) (*Console, error) {
	if o.API == nil || o.JS == nil {
		return nil, errors.New("ui: Options.API and Options.JS are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BootURL == "" {
		o.BootURL = os.Getenv(EnvBootURL)
	}
	if o.BootURL == "" {
		o.BootURL = os.Getenv(EnvBootPublicURL)
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
		if s := os.Getenv(EnvSessionTTL); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("ui: %s=%q is not a positive Go duration such as 8h", EnvSessionTTL, s)
			}
			o.SessionTTL = d
		}
	}
	if o.BootURL != "" {
		u, err := url.Parse(o.BootURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("ui: the boot URL %q is not an http(s) URL such as http://boot.example:8081", o.BootURL)
		}
	}
	store, err := newSessionStore(ctx, o.JS, o.Replicas, o.SessionTTL)
	if err != nil {
		return nil, err
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	c := &Console{api: o.API, sessions: store, bootURL: strings.TrimRight(o.BootURL, "/"), log: o.Log, pages: p}
	c.mux = c.routes()
	return c, nil
}

// Mount returns a handler that serves the console at / and /ui/ and
// everything else from next (the API).
func (c *Console) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			http.Redirect(w, r, "/ui/", http.StatusFound)
		case r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/"):
			c.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP serves the console's own paths (/ui/…).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Everything the console needs is its own: no inline script, no
	// outside font, script or image (an air-gapped cluster renders it whole).
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	c.mux.ServeHTTP(w, r)
}

// secure reports whether the browser reached us over TLS, directly or
// through a proxy that says so; the session cookie is then Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sameOrigin refuses a write whose Origin (or, without one, Referer) names
// another site: a second guard behind the CSRF token and SameSite.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true // old clients send neither; the CSRF token still guards
	}
	u, err := url.Parse(src)
	if err != nil {
		return false
	}
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = fh
	}
	return strings.EqualFold(u.Host, host)
}

// checkCSRF compares a form's csrf field with the session's token.
func checkCSRF(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
