package sim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
)

// MemNetwork carries a simulated fleet's HTTP to the boot service in
// memory: a listener the boot service serves on as well as on TCP, and
// a client whose every connection dials it, whatever the URL's address.
//
// A fleet in the same process as the boot service holds two file
// descriptors per TCP connection (both ends), and 10,000 agents each
// keep a long poll open: more than a process's usual limit of open files
// (20,000 here, and not raised without privileges). When the limit is
// reached, nats-server cannot open its stores' files and stops storing.
// The requests and answers are the same; only the sockets are not.
type MemNetwork struct {
	ln *memListener
}

// NewMemNetwork returns an in-memory network; Close ends it.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{ln: &memListener{conns: make(chan net.Conn), done: make(chan struct{})}}
}

// Listener is what the boot service serves on (Hooks.Listeners).
func (n *MemNetwork) Listener() net.Listener { return n.ln }

// HTTPClient is NewHTTPClient's client with connections that dial the
// in-memory listener.
func (n *MemNetwork) HTTPClient() *http.Client {
	c := NewHTTPClient()
	t := c.Transport.(*http.Transport)
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return n.ln.dial(ctx) }
	return c
}

// Close stops the listener: dials fail, Accept returns an error.
func (n *MemNetwork) Close() error { return n.ln.Close() }

type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var errMemClosed = errors.New("sim: in-memory network closed")

func (l *memListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- memConn{server}:
		return memConn{client}, nil
	case <-l.done:
	case <-ctx.Done():
	}
	_ = client.Close()
	_ = server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, errMemClosed
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

// memConn gives a pipe end the addresses net/http logs and keys on.
type memConn struct{ net.Conn }

func (memConn) LocalAddr() net.Addr  { return memAddr{} }
func (memConn) RemoteAddr() net.Addr { return memAddr{} }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "sim-fleet" }
