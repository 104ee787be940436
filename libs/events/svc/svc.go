// Package svc is the runtime every anvil service shares: configuration from
// flags and environment variables, logging, tracing, the NATS connection and
// event store, and the health, readiness and metrics endpoints.
package svc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anvil-fleet/anvil/libs/events"
	"github.com/anvil-fleet/anvil/libs/events/poison"
	"github.com/anvil-fleet/anvil/libs/events/telemetry"
)

// Config is what every service is told at start.
type Config struct {
	Service        string
	NATSURL        string // --nats-url / ANVIL_NATS_URL
	NATSCreds      string // --nats-creds / ANVIL_NATS_CREDS: a .creds file
	NATSUser       string // --nats-user / ANVIL_NATS_USER
	NATSPassword   string // ANVIL_NATS_PASSWORD only: a secret stays out of ps
	StreamReplicas int    // --stream-replicas / ANVIL_STREAM_REPLICAS
	AdminAddr      string // --admin-addr / ANVIL_<SERVICE>_ADMIN_ADDR: health, readiness, metrics
	LogLevel       string // --log-level / ANVIL_LOG_LEVEL
	LogFormat      string // --log-format / ANVIL_LOG_FORMAT: json or text
}

// Env returns the environment variable's value, or def.
func Env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// EnvInt is Env for integers. A malformed value is recorded (see
// ConfigError) and def stands in until the program stops.
func EnvInt(name string, def int) int {
	return envParse(name, def, "an integer such as 3", strconv.Atoi)
}

// EnvDuration is Env for durations such as "90s" or "5m"; a malformed
// value is recorded (see ConfigError).
func EnvDuration(name string, def time.Duration) time.Duration {
	return envParse(name, def, `a Go duration such as "90s" or "5m"`, time.ParseDuration)
}

// EnvFloat is Env for numbers; a malformed value is recorded (see
// ConfigError).
func EnvFloat(name string, def float64) float64 {
	return envParse(name, def, "a number such as 2.5", func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

// EnvBool is Env for booleans (true, false, 1, 0); a malformed value is
// recorded (see ConfigError).
func EnvBool(name string, def bool) bool {
	return envParse(name, def, "true or false", strconv.ParseBool)
}

// configProblems are the malformed settings read so far: every Env*
// parser records here, and Main stops the program before it runs when
// there is any, so no typo silently becomes a default; set but empty counts as unset.
var configProblems struct {
	sync.Mutex
	errs []error
}

// envParse is the one parser behind every typed Env* function.
func envParse[T any](name string, def T, want string, parse func(string) (T, error)) T {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		// Set but empty is unset: compose and systemd files write
		// NAME=${VALUE:-} for a value they leave to the default.
		return def
	}
	parsed, err := parse(strings.TrimSpace(v))
	if err != nil {
		ReportConfigError(fmt.Errorf("environment variable %s=%q: must be %s", name, v, want))
		return def
	}
	return parsed
}

// ReportConfigError records a setting that cannot be used; Main stops the
// program with every recorded problem before the service starts.
func ReportConfigError(err error) {
	configProblems.Lock()
	configProblems.errs = append(configProblems.errs, err)
	configProblems.Unlock()
}

// ConfigError is every problem recorded since the program started (or
// since the last ResetConfigErrors), joined, or nil.
func ConfigError() error {
	configProblems.Lock()
	defer configProblems.Unlock()
	return errors.Join(configProblems.errs...)
}

// ResetConfigErrors forgets the recorded problems (tests that read
// configuration several times in one process).
func ResetConfigErrors() {
	configProblems.Lock()
	configProblems.errs = nil
	configProblems.Unlock()
}

// Validate checks the shared settings whose values come from a fixed set.
func (c *Config) Validate() error {
	var errs []error
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		errs = append(errs, fmt.Errorf("--stream-replicas (env ANVIL_STREAM_REPLICAS) = %d: must be 1 to 5, as JetStream allows", c.StreamReplicas))
	}
	if c.AdminAddr != "" {
		if err := CheckListenAddr(c.AdminAddr); err != nil {
			errs = append(errs, fmt.Errorf("--admin-addr (env ANVIL_%s_ADMIN_ADDR) = %q: %v", upper(c.Service), c.AdminAddr, err))
		}
	}
	if err := CheckLogSettings(c.LogLevel, c.LogFormat); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckListenAddr checks a listen address (host:port, the host optional,
// the port a number up to 65535, 0 for any free port) when the settings
// are read, so that a typo stops the program naming its setting instead
// of failing later at bind time.
func CheckListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("must be host:port, such as 127.0.0.1:8080 or :8080")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("the port %q must be a number from 0 to 65535", port)
	}
	return nil
}

// CheckLogSettings reports a log level or format that NewLogger would not
// understand; empty means the default.
func CheckLogSettings(level, format string) error {
	var errs []error
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); level != "" && err != nil {
		errs = append(errs, fmt.Errorf("--log-level (env ANVIL_LOG_LEVEL) = %q: must be debug, info, warn or error", level))
	}
	if f := strings.ToLower(format); f != "" && f != "json" && f != "text" {
		errs = append(errs, fmt.Errorf("--log-format (env ANVIL_LOG_FORMAT) = %q: must be json or text", format))
	}
	return errors.Join(errs...)
}

// RegisterFlags binds the shared flags, each defaulting to its environment
// variable. adminAddr is the service's default admin listener.
func (c *Config) RegisterFlags(fs *flag.FlagSet, service, adminAddr string) {
	c.Service = service
	fs.StringVar(&c.NATSURL, "nats-url", Env("ANVIL_NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated (env ANVIL_NATS_URL)")
	fs.StringVar(&c.NATSCreds, "nats-creds", Env("ANVIL_NATS_CREDS", ""), "NATS credentials file (env ANVIL_NATS_CREDS)")
	fs.StringVar(&c.NATSUser, "nats-user", Env("ANVIL_NATS_USER", ""), "NATS user; the password comes from env ANVIL_NATS_PASSWORD (env ANVIL_NATS_USER)")
	c.NATSPassword = os.Getenv("ANVIL_NATS_PASSWORD")
	fs.IntVar(&c.StreamReplicas, "stream-replicas", EnvInt("ANVIL_STREAM_REPLICAS", 1), "replicas of the EVENTS stream when this service creates it (env ANVIL_STREAM_REPLICAS)")
	envAdmin := "ANVIL_" + upper(service) + "_ADMIN_ADDR"
	fs.StringVar(&c.AdminAddr, "admin-addr", Env(envAdmin, adminAddr), "listen address for /healthz, /readyz and /metrics; empty disables (env "+envAdmin+")")
	fs.StringVar(&c.LogLevel, "log-level", Env("ANVIL_LOG_LEVEL", "info"), "debug, info, warn or error (env ANVIL_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", Env("ANVIL_LOG_FORMAT", "json"), "json or text (env ANVIL_LOG_FORMAT)")
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// Runtime is a started service's shared machinery.
type Runtime struct {
	Config   Config
	Log      *slog.Logger
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Store    *events.JetStreamStore
	Poison   *poison.Queue
	Registry *events.Registry
	Health   *Health

	started atomic.Bool // see Started
	closers []func(context.Context) error
	life    lifecycle // see Go, Project, HandleEvents, OnStop and Wait
}

// Options adjust Start for the in-process dev stack and tests.
type Options struct {
	Conn   *nats.Conn   // an existing connection (in-process); otherwise dial NATSURL
	Logger *slog.Logger // otherwise built from the config
}

// Start connects to NATS, ensures the streams, and opens the store.
func Start(ctx context.Context, cfg Config, reg *events.Registry, o Options) (*Runtime, error) {
	rt := &Runtime{Config: cfg, Registry: reg, Log: o.Logger, Health: NewHealth()}
	rt.life.init(ctx)
	if rt.Log == nil {
		rt.Log = telemetry.NewLogger(cfg.Service, cfg.LogLevel, cfg.LogFormat)
	}
	nc := o.Conn
	if nc == nil {
		opts := []nats.Option{
			nats.Name("anvil-" + cfg.Service),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second),
			// A server that was cut off is noticed within seconds, not
			// after the default two minutes of pings, so the client moves
			// to a reachable node of the cluster.
			nats.PingInterval(5 * time.Second),
			nats.MaxPingsOutstanding(2),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { rt.Log.Warn("NATS disconnected", "err", err) }),
			nats.ReconnectHandler(func(c *nats.Conn) { rt.Log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted()) }),
		}
		if cfg.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
		}
		if cfg.NATSUser != "" {
			opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
		}
		var err error
		if nc, err = nats.Connect(cfg.NATSURL, opts...); err != nil {
			return nil, fmt.Errorf("%s: connecting to NATS at %s: %w", cfg.Service, cfg.NATSURL, err)
		}
		rt.closers = append(rt.closers, func(context.Context) error { return nc.Drain() })
	}
	rt.Conn = nc
	rt.Health.Add("nats", func(context.Context) error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	rt.JS = js
	// A JetStream cluster that is still electing its meta leader (all
	// services starting at once on a fresh cluster) answers stream
	// requests with timeouts for a while: try again rather than exit.
	err = retryStartup(ctx, rt.Log, "the event stream", func(ctx context.Context) (err error) {
		rt.Store, err = events.NewJetStreamStore(ctx, js, reg, events.StreamOptions{Replicas: cfg.StreamReplicas})
		if err == nil {
			rt.Store.SetDefaultActor("service:" + cfg.Service)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	err = retryStartup(ctx, rt.Log, "the poison stream", func(ctx context.Context) error {
		return poison.EnsureStream(ctx, js, cfg.StreamReplicas)
	})
	if err != nil {
		return nil, err
	}
	rt.Poison = poison.New(js)
	rt.addStartedCheck()
	if cfg.AdminAddr != "" {
		srv, err := Serve(cfg.AdminAddr, rt.Health.AdminMux(), rt.Log)
		if err != nil {
			return nil, err
		}
		rt.closers = append(rt.closers, srv.Shutdown)
	}
	rt.closers = append(rt.closers, trackRuntime(rt)) // anvil_build_info, anvil_nats_connected, anvil_jetstream_available
	return rt, nil
}

// startupAttempts bounds retryStartup: about a minute in all.
const startupAttempts = 12

// retryStartup runs fn until it succeeds, ctx ends, or it failed with
// something other than a timeout or an unavailable JetStream.
func retryStartup(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		transient := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders)
		if err == nil || !transient || attempt >= startupAttempts || ctx.Err() != nil {
			return err
		}
		log.Warn("setting up "+what+" timed out; trying again", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// OnClose registers fn to run at Close, in reverse order.
func (rt *Runtime) OnClose(fn func(context.Context) error) { rt.closers = append(rt.closers, fn) }

// Close stops the service as Wait does, if Wait did not (a service that
// failed while starting), then releases everything Start and OnClose set
// up.
func (rt *Runtime) Close(ctx context.Context) {
	rt.stop()
	for i := len(rt.closers) - 1; i >= 0; i-- {
		if err := rt.closers[i](ctx); err != nil {
			rt.Log.Warn("close", "err", err)
		}
	}
}

// Timeouts of every HTTP server a service starts with Serve.
var (
	ReadTimeout  = 30 * time.Second
	WriteTimeout = 60 * time.Second
	IdleTimeout  = 2 * time.Minute
)

// liftStreamDeadline lifts the write deadline of event streams (a client
// that asks for text/event-stream): they outlive any WriteTimeout by
// design, and this writer is the server's own, so the deadline always
// reaches the connection whatever wraps it further down.
func liftStreamDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		}
		h.ServeHTTP(w, r)
	})
}

// Serve listens on addr and serves h until Shutdown; the server's Addr is
// the address it listens on (the port chosen, when addr's is 0).
func Serve(addr string, h http.Handler, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: liftStreamDeadline(h), ReadHeaderTimeout: 10 * time.Second,
		// A slow client cannot hold a connection: the whole request must
		// arrive within ReadTimeout and the answer leave within
		// WriteTimeout (a stream, such as an operation log over SSE,
		// lifts its own write deadline), and idle keep-alive
		// connections close.
		ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout,
		Addr: ln.Addr().String()} // the actual address, when addr's port is 0
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("listening", "addr", ln.Addr().String())
	return srv, nil
}

// Health holds named readiness checks.
type Health struct {
	mu     sync.RWMutex
	checks map[string]func(context.Context) error
}

// NewHealth returns an empty set of checks.
func NewHealth() *Health { return &Health{checks: map[string]func(context.Context) error{}} }

// Add registers a readiness check.
func (h *Health) Add(name string, check func(context.Context) error) {
	h.mu.Lock()
	h.checks[name] = check
	h.mu.Unlock()
}

// Ready runs every check and returns the failures by name.
func (h *Health) Ready(ctx context.Context) map[string]string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	failed := map[string]string{}
	for name, c := range h.checks {
		if err := c(ctx); err != nil {
			failed[name] = err.Error()
		}
	}
	return failed
}

// Mux returns a mux with /healthz and /readyz added to mux (or to a new one
// when mux is nil). A public listener (the gateway's API, the boot
// service's) mounts these; /metrics is only on the admin listener
// (AdminMux).
func (h *Health) Mux(mux *http.ServeMux) *http.ServeMux {
	if mux == nil {
		mux = http.NewServeMux()
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		failed := h.Ready(ctx)
		w.Header().Set("Content-Type", "text/plain")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for name, why := range failed {
				fmt.Fprintf(w, "%s: %s\n", name, why)
			}
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// AdminMux is the admin listener's mux: /healthz, /readyz and /metrics
// (Prometheus text of the process's default registry).
func (h *Health) AdminMux() *http.ServeMux {
	mux := h.Mux(nil)
	mux.Handle("GET /metrics", promhttp.Handler())
	return mux
}
