package charttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// natsSecrets is the operator's Secret the NATS tests render against. The passwords are what
// `openssl rand -hex` may give (all digits, or digits and a unit such as 1k), which nats-server
// would read as numbers were they not quoted.
var natsSecrets = map[string]map[string]string{"anvil-secrets": {
	"nats-registry-password":  "12345678901234567890123456789012",
	"nats-revisions-password": "1k",
	"nats-rollout-password":   "9e9f00aa11bb22cc33dd44ee55ff6677",
	"nats-boot-password":      "b0075ecret0b0075ecret0b0075ecret",
	"nats-gateway-password":   "gAtEwAy0123456789gAtEwAy01234567",
	"nats-routes-password":    "0123456789abcdef0123456789abcdef",
}}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv resolves a container's environment as the kubelet does for pod podName: values from
// Secrets and the pod's name, and $(VAR) references to variables defined before. Resource
// fields (GOMEMLIMIT) are left out: they would change this test process.
func podEnv(t *testing.T, c corev1.Container, podName string, secrets map[string]map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				if v, ok := env[envRef.FindStringSubmatch(ref)[1]]; ok {
					return v
				}
				return ref
			})
		case e.ValueFrom.SecretKeyRef != nil:
			v, ok := secrets[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("%s: no key %s in Secret %s", e.Name, e.ValueFrom.SecretKeyRef.Key, e.ValueFrom.SecretKeyRef.Name)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		}
	}
	return env
}

// TestNATSConfig parses the bundled nats-server configuration with nats-server itself (with
// the environment the StatefulSet gives it, resolved as the kubelet would), then serves it as
// one JetStream server and checks each service user's permissions on the subjects the services
// use.
func TestNATSConfig(t *testing.T) {
	r := render(t, loadChart(t), "anvil", "anvil", map[string]any{"existingSecret": "anvil-secrets"})
	dir := t.TempDir()
	cm := r.get(t, "ConfigMap", "anvil-nats-config").(*corev1.ConfigMap)
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(cm.Data["nats.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	sts := r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet)
	for k, v := range podEnv(t, sts.Spec.Template.Spec.Containers[0], "anvil-nats-0", natsSecrets) {
		t.Setenv(k, v)
	}
	passwords := map[string]string{}
	for _, svc := range services {
		passwords[svc] = natsSecrets["anvil-secrets"]["nats-"+svc+"-password"]
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v", err)
	}
	if opts.ServerName != "anvil-nats-0" || !opts.JetStream || opts.StoreDir != "/data" {
		t.Errorf("server name %q, JetStream %v, store %q", opts.ServerName, opts.JetStream, opts.StoreDir)
	}
	if opts.LameDuckDuration != 30*time.Second || opts.LameDuckGracePeriod != 10*time.Second || opts.PidFile != "/var/run/nats/nats.pid" {
		t.Errorf("lame duck %v after %v, pid file %q", opts.LameDuckDuration, opts.LameDuckGracePeriod, opts.PidFile)
	}
	routePassword := natsSecrets["anvil-secrets"]["nats-routes-password"]
	if opts.Cluster.Name != "anvil" || len(opts.Routes) != 3 || opts.Cluster.Username != "anvil-route" || opts.Cluster.Password != routePassword {
		t.Errorf("cluster %q with %d routes, route user %q, password from the Secret: %v", opts.Cluster.Name, len(opts.Routes),
			opts.Cluster.Username, opts.Cluster.Password == routePassword)
	}
	for i, u := range opts.Routes {
		if pw, _ := u.User.Password(); u.User.Username() != opts.Cluster.Username || pw != opts.Cluster.Password {
			t.Errorf("route %s does not carry the cluster's credentials", u.Redacted())
		}
		if want := fmt.Sprintf("anvil-nats-%d.anvil-nats-headless.anvil.svc:6222", i); u.Host != want {
			t.Errorf("route %d goes to %s, want %s", i, u.Host, want)
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
	opts.PidFile = filepath.Join(dir, "nats.pid")
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

// TestNATSPreStopEntersLameDuckMode runs nats-server (built from the module the images are built
// from) with the rendered configuration of a one-server NATS and the environment the kubelet
// would give it, then runs the StatefulSet's preStop command: the server must enter lame duck
// mode, which closes its client listener at once.
func TestNATSPreStopEntersLameDuckMode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the build of nats-server")
	}
	r := render(t, loadChart(t), "anvil", "anvil", map[string]any{"existingSecret": "anvil-secrets",
		"nats": map[string]any{"streamReplicas": 1, "bundled": map[string]any{"replicas": 1}}})
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("building nats-server: %v\n%s", err, out)
	}
	// The rendered configuration, with this host's paths and free ports for the pod's.
	const podPid = "/var/run/nats/nats.pid"
	pid := filepath.Join(dir, "nats.pid")
	conf := r.get(t, "ConfigMap", "anvil-nats-config").(*corev1.ConfigMap).Data["nats.conf"]
	for old, repl := range map[string]string{
		`listen: "0.0.0.0:4222"`: `listen: "127.0.0.1:-1"`,
		`http: "0.0.0.0:8222"`:   `http: "127.0.0.1:-1"`,
		`"/data"`:                strconv.Quote(filepath.Join(dir, "data")),
		strconv.Quote(podPid):    strconv.Quote(pid),
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("nats.conf has no %s", old)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c := r.get(t, "StatefulSet", "anvil-nats").(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0]
	srv := exec.Command(bin, append(slices.Clone(c.Args[:1]), filepath.Join(dir, "nats.conf"))...)
	for k, v := range podEnv(t, c, "anvil-nats-0", natsSecrets) {
		srv.Env = append(srv.Env, k+"="+v)
	}
	var logs procLog
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	if !logs.await("Server is ready", time.Minute) {
		t.Fatalf("nats-server did not start:\n%s", logs.String())
	}
	url := regexp.MustCompile(`Listening for client connections on (\S+)`).FindStringSubmatch(logs.String())
	if url == nil {
		t.Fatalf("no client listener in the log:\n%s", logs.String())
	}
	nc, err := nats.Connect("nats://"+url[1], nats.UserInfo("anvil-registry", natsSecrets["anvil-secrets"]["nats-registry-password"]))
	if err != nil {
		t.Fatalf("the registry cannot connect with its password: %v", err)
	}
	nc.Close()

	// The hook, as rendered, with this host's binary and pid file.
	hook := slices.Clone(c.Lifecycle.PreStop.Exec.Command)
	hook[0] = bin
	for i := range hook {
		hook[i] = strings.ReplaceAll(hook[i], podPid, pid)
	}
	if out, err := exec.CommandContext(t.Context(), hook[0], hook[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("the preStop hook failed: %v\n%s", err, out)
	}
	if !logs.await("Entering lame duck mode", 30*time.Second) {
		t.Fatalf("the server did not enter lame duck mode:\n%s", logs.String())
	}
}

// procLog collects a process's output for polling.
type procLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *procLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *procLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// await polls the output until it contains s.
func (l *procLog) await(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(l.String(), s) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
