// Package natsserver runs nats-server with JetStream inside the process, for
// the development stack and for tests: the real server, not a fake.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options configure an embedded server.
type Options struct {
	DataDir string // JetStream file storage lives here
	Host    string // listen address for external clients; "" means no listener
	Port    int    // 0 picks a free port when Host is set
	Name    string
	// Logger receives the server's warnings and errors (slow consumers,
	// stalled stores, limits reached) and, at debug level, its notices;
	// nil: the server logs nothing.
	Logger *slog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	ns *server.Server
}

// Start starts a JetStream-enabled server and waits until it is ready.
func Start(o Options) (*Server, error) {
	if o.DataDir == "" {
		return nil, errors.New("natsserver: DataDir is required")
	}
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: o.Name,
		JetStream:  true,
		StoreDir:   o.DataDir,
		NoSigs:     true,
		NoLog:      true,
		Host:       o.Host,
		Port:       o.Port,
		// Event payloads are small; one MiB is ample and matches the default.
		MaxPayload: 1 << 20,
	}
	if o.Host == "" {
		opts.DontListen = true
	} else if o.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if o.Logger != nil {
		opts.NoLog = false
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	if o.Logger != nil {
		ns.SetLoggerV2(serverLog{o.Logger.With("component", "nats-server")}, false, false, false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("natsserver: not ready after 30s")
	}
	return &Server{ns: ns}, nil
}

// Connect opens an in-process client connection (no TCP).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.ns), nats.MaxReconnects(-1)}, opts...)
	return nats.Connect("", opts...)
}

// ClientURL is the URL for external clients, or "" when not listening.
func (s *Server) ClientURL() string {
	if s.ns.Addr() == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// serverLog is nats-server's logger on slog: what the server warns about
// (a slow consumer, a store that cannot keep up) must reach the
// operator's logs with everything else.
type serverLog struct{ log *slog.Logger }

func (l serverLog) logf(level slog.Level, format string, v []any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (l serverLog) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l serverLog) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l serverLog) Fatalf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l serverLog) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l serverLog) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug-4, format, v) }
func (l serverLog) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug-8, format, v) }
