package eventstest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anvil-fleet/anvil/libs/events"
)

// ClusterSize is the number of servers StartCluster runs: the smallest
// cluster that keeps a quorum of a replicated stream with one server down.
const ClusterSize = 3

// clusterWait bounds every wait of the cluster harness (formation, leader
// elections, catching up). It is a deadline for a failing test, not an
// expectation: an election after a clean shutdown takes well under a second.
const clusterWait = 30 * time.Second

// Cluster is a JetStream cluster of three nats-servers in the test's
// process, as nats-server's own tests run one: each with its own store
// directory, client and route listeners on 127.0.0.1, routed to the other
// two. A test stops, restarts or steps down servers to move the leaders of
// a replicated stream, and connects clients to all three, which fail over
// as production clients do.
type Cluster struct {
	t     testing.TB
	name  string
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	name       string
	dir        string
	clientPort int
	routePort  int
	srv        *server.Server // nil while stopped
}

// StartCluster starts three servers for t, waits until they have elected
// a JetStream meta leader that sees all three, and shuts them down at t's
// cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{t: t, name: "anvil-test"}
	// The route ports must be known before any server starts, since each
	// names the others'; the client ports are taken once and kept, so that
	// a restarted server answers at the URL clients already hold.
	ports := freePorts(t, 2*ClusterSize)
	base := t.TempDir()
	for i := range ClusterSize {
		c.nodes = append(c.nodes, &clusterNode{
			name:       fmt.Sprintf("n%d", i+1),
			dir:        filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			clientPort: ports[2*i],
			routePort:  ports[2*i+1],
		})
	}
	t.Cleanup(c.shutdown)
	for i := range c.nodes {
		c.start(i)
	}
	c.WaitMetaLeader()
	return c
}

// freePorts returns n distinct ports that were free a moment ago on
// 127.0.0.1 (the operating system picked them).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("cluster: reserving a port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	var routes []string
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.routePort))
		}
	}
	opts := &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.clientPort,
		JetStream:  true,
		StoreDir:   n.dir,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 1 << 20,
		Cluster:    server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: n.routePort},
		Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		c.t.Fatalf("cluster: server %s: %v", n.name, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(clusterWait) {
		srv.Shutdown()
		c.t.Fatalf("cluster: server %s not ready (is port %d or %d taken?)", n.name, n.clientPort, n.routePort)
	}
	c.mu.Lock()
	n.srv = srv
	c.mu.Unlock()
}

func (c *Cluster) shutdown() {
	for i := range c.nodes {
		c.stop(i)
	}
}

func (c *Cluster) stop(i int) bool {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv == nil {
		return false
	}
	// A clean shutdown hands the server's raft leaderships to another
	// server first, as a rolling restart in production does.
	srv.Shutdown()
	srv.WaitForShutdown()
	return true
}

// running returns the servers that are up, by index.
func (c *Cluster) running() map[int]*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	up := map[int]*server.Server{}
	for i, n := range c.nodes {
		if n.srv != nil {
			up[i] = n.srv
		}
	}
	return up
}

// Name returns server i's name (n1, n2, n3).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// URLs returns the client URLs of all three servers, stopped ones
// included: a restarted server listens at the same URL.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort)
	}
	return urls
}

// Connect opens a connection to all three servers for t, closed at t's
// cleanup. It reconnects to another server when its own goes away,
// however often.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		// Another server is tried at once; this only spaces attempts at
		// one that was just tried, while the cluster elects leaders.
		nats.ReconnectWait(50 * time.Millisecond),
	}, opts...)
	nc, err := nats.Connect(strings.Join(c.URLs(), ","), opts...)
	if err != nil {
		t.Fatalf("cluster: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Store connects a client for t and opens an event store on it whose
// EVENTS stream has o.Replicas replicas (3 if unset), and waits until the
// stream has a leader and every replica is current.
func (c *Cluster) Store(t testing.TB, reg *events.Registry, o events.StreamOptions) (*events.JetStreamStore, jetstream.JetStream) {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = ClusterSize
	}
	js, err := jetstream.New(c.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	store, err := events.NewJetStreamStore(ctx, js, reg, o)
	if err != nil {
		t.Fatalf("cluster: event store: %v", err)
	}
	c.WaitStreamCurrent(events.StreamName)
	return store, js
}

// WaitMetaLeader waits until a running server is the JetStream meta
// leader and sees every running server as a JetStream peer, and returns
// the leader's index.
func (c *Cluster) WaitMetaLeader() int {
	c.t.Helper()
	leader := -1
	Eventually(c.t, "a JetStream meta leader that sees every running server", clusterWait, 10*time.Millisecond, func() (bool, string) {
		up := c.running()
		for i, s := range up {
			if s.JetStreamIsLeader() {
				peers := s.JetStreamClusterPeers()
				leader = i
				return len(peers) == len(up), fmt.Sprintf("leader %s sees peers %v of %d running", c.nodes[i].name, peers, len(up))
			}
		}
		return false, "no meta leader"
	})
	return leader
}

// StreamLeader returns the index of the server that leads stream, or -1
// if no running server does right now.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.running() {
		if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until a running server leads stream, and
// returns its index.
func (c *Cluster) WaitStreamLeader(stream string) int {
	c.t.Helper()
	leader := -1
	Eventually(c.t, "a leader of stream "+stream, clusterWait, 10*time.Millisecond, func() (bool, string) {
		leader = c.StreamLeader(stream)
		return leader >= 0, "no running server leads it"
	})
	return leader
}

// WaitStreamCurrent waits until stream has a leader and its replica on
// every running server is current with it.
func (c *Cluster) WaitStreamCurrent(stream string) {
	c.t.Helper()
	Eventually(c.t, "stream "+stream+" current on every running server", clusterWait, 10*time.Millisecond, func() (bool, string) {
		if c.StreamLeader(stream) < 0 {
			return false, "no leader"
		}
		var behind []string
		for i, s := range c.running() {
			if !s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				behind = append(behind, c.nodes[i].name)
			}
		}
		slices.Sort(behind)
		return len(behind) == 0, fmt.Sprintf("behind: %v", behind)
	})
}

// Stop shuts server i down (cleanly: it hands its leaderships over
// first). Its data stays for Restart.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	if !c.stop(i) {
		c.t.Fatalf("cluster: server %s is not running", c.nodes[i].name)
	}
}

// Restart starts a stopped server i again on its data and ports, and
// waits until the meta leader sees it.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	up := c.nodes[i].srv != nil
	c.mu.Unlock()
	if up {
		c.t.Fatalf("cluster: server %s is running", c.nodes[i].name)
	}
	c.start(i)
	c.WaitMetaLeader()
}

// StopStreamLeader stops the server that leads stream, waits until
// another one leads it, and returns both indexes.
func (c *Cluster) StopStreamLeader(stream string) (stopped, leader int) {
	c.t.Helper()
	stopped = c.WaitStreamLeader(stream)
	c.Stop(stopped)
	leader = c.WaitStreamLeader(stream)
	return stopped, leader
}

// StepDownStreamLeader asks the leader of stream to hand its leadership
// to another server, waits until one has it, and returns both indexes.
func (c *Cluster) StepDownStreamLeader(stream string) (old, leader int) {
	c.t.Helper()
	old = c.WaitStreamLeader(stream)
	srv := c.running()[old]
	if err := srv.JetStreamStepdownStream(server.DEFAULT_GLOBAL_ACCOUNT, stream); err != nil {
		c.t.Fatalf("cluster: step down %s on %s: %v", stream, c.nodes[old].name, err)
	}
	Eventually(c.t, "another leader of stream "+stream, clusterWait, 10*time.Millisecond, func() (bool, string) {
		leader = c.StreamLeader(stream)
		return leader >= 0 && leader != old, fmt.Sprintf("leader: %d", leader)
	})
	return old, leader
}
