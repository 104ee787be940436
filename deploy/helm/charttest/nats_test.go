package charttest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
)

// TestNATSConfig parses the bundled nats-server configuration with nats-server itself (with
// the environment the StatefulSet gives it), then serves it as one JetStream server and checks
// each service user's permissions on the subjects the services use.
func TestNATSConfig(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", nil)
	dir := t.TempDir()
	cm := r.get(t, "ConfigMap", "anvil-nats-config").(*corev1.ConfigMap)
	routes := r.get(t, "Secret", "anvil-nats-routes").(*corev1.Secret)
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(cm.Data["nats.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "routes.conf"), routes.Data["routes.conf"], 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_SERVER_NAME", "anvil-nats-0")
	passwords := map[string]string{}
	for _, svc := range services {
		pw := string(r.get(t, "Secret", "anvil-nats-"+svc).(*corev1.Secret).Data["password"])
		passwords[svc] = pw
		t.Setenv("NATS_PASSWORD_"+strings.ToUpper(svc), pw)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v", err)
	}
	if opts.ServerName != "anvil-nats-0" || !opts.JetStream || opts.StoreDir != "/data" {
		t.Errorf("server name %q, JetStream %v, store %q", opts.ServerName, opts.JetStream, opts.StoreDir)
	}
	if opts.Cluster.Name != "anvil" || len(opts.Routes) != 3 || opts.Cluster.Username != "anvil-route" {
		t.Errorf("cluster %q with %d routes, route user %q", opts.Cluster.Name, len(opts.Routes), opts.Cluster.Username)
	}
	for _, u := range opts.Routes {
		if pw, _ := u.User.Password(); u.User.Username() != opts.Cluster.Username || pw != opts.Cluster.Password {
			t.Errorf("route %s does not carry the cluster's credentials", u.Redacted())
		}
	}
	if len(opts.Users) != len(services) {
		t.Fatalf("%d users, want %d", len(opts.Users), len(services))
	}
	for _, u := range opts.Users {
		svc := strings.TrimPrefix(u.Username, "anvil-")
		if u.Password != passwords[svc] || u.Permissions == nil {
			t.Errorf("user %s: wrong password or no permissions", u.Username)
		}
	}

	// Serve it alone: one server, no routes, loopback.
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir = t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	conns := map[string]*conn{}
	for _, svc := range services {
		conns[svc] = connect(t, srv.ClientURL(), "anvil-"+svc, passwords[svc])
	}
	reg, rev, rol, boot, gw := conns["registry"], conns["revisions"], conns["rollout"], conns["boot"], conns["gateway"]

	// The event log: created and appended to by an owner, read by everyone.
	if _, err := reg.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, DenyDelete: true, DenyPurge: true}); err != nil {
		t.Fatalf("registry creates EVENTS: %v", err)
	}
	if _, err := rev.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "POISON", Subjects: []string{"poison.>"}}); err != nil {
		t.Fatalf("revisions ensures POISON: %v", err)
	}
	for _, c := range []*conn{reg, rev, rol} {
		if _, err := c.js.Publish(ctx, "events.o1.machine.m1", []byte("{}")); err != nil {
			t.Errorf("%s appends an event: %v", c.user, err)
		}
	}
	if _, err := rev.js.Publish(ctx, "poison.projection-revisions", []byte("{}")); err != nil {
		t.Errorf("revisions poisons an event: %v", err)
	}
	gw.denied(t, "events.o1.machine.m1")
	boot.denied(t, "events.o1.machine.m1")
	gw.denied(t, "poison.x")
	for _, c := range conns {
		s, err := c.js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Errorf("%s reads EVENTS: %v", c.user, err)
			continue
		}
		// A durable, acked consumer (handlers, projections) and an ordered one (replays).
		cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "test-" + c.user, AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Errorf("%s creates a consumer: %v", c.user, err)
			continue
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Errorf("%s fetches an event: %v", c.user, err)
			continue
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("%s acks an event: %v", c.user, err)
		}
	}
	gwCtx, gwCancel := context.WithTimeout(ctx, 2*time.Second)
	if err := gw.js.DeleteStream(gwCtx, "EVENTS"); err == nil {
		t.Error("the gateway deleted EVENTS")
	}
	gwCancel()
	if _, err := reg.js.Stream(ctx, "EVENTS"); err != nil {
		t.Errorf("EVENTS is gone: %v", err)
	}

	// KV: written by its owner, read only by those who need it.
	kv := func(c *conn, bucket string) (jetstream.KeyValue, error) {
		return c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
	}
	for c, bucket := range map[*conn]string{reg: "anvil_heartbeats", gw: "anvil_idempotency", rol: "anvil_rollout_leases",
		boot: "anvil_boot_keys"} {
		b, err := kv(c, bucket)
		if err != nil {
			t.Errorf("%s creates %s: %v", c.user, bucket, err)
			continue
		}
		if _, err := b.Put(ctx, "k", []byte("v")); err != nil {
			t.Errorf("%s writes %s: %v", c.user, bucket, err)
		}
	}
	records, err := kv(boot, "anvil_boot_machines")
	if err != nil {
		t.Fatalf("boot creates its records: %v", err)
	}
	if _, err := records.Put(ctx, "o1.m1", []byte("{}")); err != nil {
		t.Errorf("boot writes its records: %v", err)
	}
	if b, err := rol.js.KeyValue(ctx, "anvil_boot_machines"); err != nil {
		t.Errorf("rollout opens the boot records: %v", err)
	} else if w, err := b.WatchAll(ctx); err != nil {
		t.Errorf("rollout watches the boot records: %v", err)
	} else {
		select {
		case e := <-w.Updates():
			if e == nil || e.Key() != "o1.m1" {
				t.Errorf("rollout's watch saw %v", e)
			}
		case <-time.After(5 * time.Second):
			t.Error("rollout's watch of the boot records saw nothing")
		}
		_ = w.Stop()
	}
	for _, c := range []*conn{gw, rol, reg, rev} {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		if b, err := c.js.KeyValue(short, "anvil_boot_keys"); err == nil {
			if _, err := b.Get(short, "k"); err == nil {
				t.Errorf("%s read the boot signing key", c.user)
			}
		}
		cancel()
	}
	rev.denied(t, "$KV.anvil_heartbeats.o1.m1")

	// Commands: served in the owner's queue group, answered through allow_responses.
	sub, err := reg.nc.QueueSubscribe("cmd.registry.>", "registry", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := reg.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*conn{gw, boot, rol} {
		if m, err := c.nc.Request("cmd.registry.org.list", nil, 5*time.Second); err != nil || string(m.Data) != "ok" {
			t.Errorf("%s calls the registry: %v", c.user, err)
		}
	}
	rev.denied(t, "cmd.registry.org.list")

	// The revisions service asks the boot service about assets, and only that.
	bsub, err := boot.nc.QueueSubscribe("cmd.boot.>", "boot", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		t.Fatal(err)
	}
	defer bsub.Unsubscribe()
	if err := boot.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := rev.nc.Request("cmd.boot.assets.resolve", nil, 5*time.Second); err != nil || string(m.Data) != "ok" {
		t.Errorf("revisions resolves assets: %v", err)
	}
	rev.denied(t, "cmd.boot.instruction.get")
	gw.deniedSub(t, "cmd.registry.>")
	boot.deniedSub(t, "events.>")
}

type conn struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream
	mu   sync.Mutex
	errs []error
}

func connect(t *testing.T, url, user, password string) *conn {
	t.Helper()
	c := &conn{user: user}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.mu.Lock()
		c.errs = append(c.errs, err)
		c.mu.Unlock()
	}))
	if err != nil {
		t.Fatalf("%s connects: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// denied publishes to subject and expects the server's permissions violation.
func (c *conn) denied(t *testing.T, subject string) {
	t.Helper()
	c.expectViolation(t, "publish to "+subject, func() error { return c.nc.Publish(subject, []byte("x")) })
}

// deniedSub subscribes to subject and expects the server's permissions violation.
func (c *conn) deniedSub(t *testing.T, subject string) {
	t.Helper()
	c.expectViolation(t, "subscribe to "+subject, func() error {
		_, err := c.nc.SubscribeSync(subject)
		return err
	})
}

func (c *conn) expectViolation(t *testing.T, what string, op func() error) {
	t.Helper()
	c.mu.Lock()
	c.errs = nil
	c.mu.Unlock()
	if err := op(); err != nil {
		t.Fatal(err)
	}
	_ = c.nc.Flush()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, err := range c.errs {
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s may %s", c.user, what)
}
