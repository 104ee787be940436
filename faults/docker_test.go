package faults_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/anvil-fleet/anvil/services/boot/api/simassets"
)

// The images the tests run, tagged anvil/<name>:<VERSION>.
var imageNames = []string{"nats-server", "anvil-registry", "anvil-revisions", "anvil-rollout", "anvil-boot", "anvil-gateway"}

// The services, in the order their containers are listed.
var serviceNames = []string{"registry", "revisions", "rollout", "boot", "gateway"}

const (
	natsNodes = 3
	adminPort = "9100" // every service's --admin-addr in its container
	// imageUser is the user the images run as; a bind-mounted data
	// directory must be writable by it.
	imageUser = 65532
)

// repoRoot is the repository root (the test runs in faults/).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dockerPool returns a pool on the local Docker engine, or skips the test
// with one line when none answers.
func dockerPool(t testing.TB) *dockertest.Pool {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err != nil {
		t.Skipf("fault tests skipped: no Docker client: %v", err)
	}
	pool.MaxWait = 2 * time.Minute
	if err := pool.Client.Ping(); err != nil {
		t.Skipf("fault tests skipped: no Docker engine answers: %v", oneLine(err.Error()))
	}
	return pool
}

// ensureImages builds, with the repository's own script
// (deploy/images/build.sh, which reuses Go's build cache), the images that
// are missing or were built from other sources than the checkout's (their
// dev.anvil.source-tree label), so that the test runs the code it is
// testing; every one of them with ANVIL_FAULTS_REBUILD=1, none that exists
// with ANVIL_FAULTS_REUSE_IMAGES=1. It skips the test with one line when
// they cannot be built.
func ensureImages(t testing.TB, pool *dockertest.Pool, root, version string) {
	t.Helper()
	tree := sourceTree(root)
	var build []string
	for _, n := range imageNames {
		img, err := pool.Client.InspectImage("anvil/" + n + ":" + version)
		switch {
		case err != nil:
			build = append(build, n)
		case os.Getenv("ANVIL_FAULTS_REUSE_IMAGES") != "":
		case os.Getenv("ANVIL_FAULTS_REBUILD") != "":
			build = append(build, n)
		case n == "nats-server":
			// Built from the module cache at the workspace's version, not
			// from the checkout: the version in its description tells.
			if v := natsVersion(root); v == "" || !strings.HasSuffix(img.Config.Labels["org.opencontainers.image.description"], " "+v) {
				build = append(build, n)
			}
		case tree == "" || img.Config.Labels["dev.anvil.source-tree"] != tree:
			build = append(build, n)
		}
	}
	if len(build) == 0 {
		t.Logf("images %v hold the checkout's sources (tree %.12s)", imageNames, tree)
		return
	}
	t.Logf("building images %v with deploy/images/build.sh (missing, or built from other sources than the checkout's tree %.12s)", build, tree)
	start := time.Now()
	cmd := exec.Command("bash", append([]string{"deploy/images/build.sh"}, build...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("fault tests skipped: images %v could not be built: bash deploy/images/build.sh failed: %v: %s", build, err, lastLine(out))
	}
	t.Logf("built the images in %s", time.Since(start).Round(time.Second))
}

// natsVersion is the nats-server version the workspace resolves (what
// deploy/images/build.sh builds and names in the image's description).
func natsVersion(root string) string {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// sourceTree is the label deploy/images/build.sh gives the images it
// builds from the checkout as it is now (bash deploy/images/build.sh
// --source-tree); empty when git cannot tell.
func sourceTree(root string) string {
	cmd := exec.Command("bash", "deploy/images/build.sh", "--source-tree")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cluster is the containers: three nats-server nodes and the services, on a
// Docker network of their own.
type cluster struct {
	t       testing.TB
	pool    *dockertest.Pool
	version string
	prefix  string // of every container's and the network's name
	dir     string // configurations and JetStream data on the host
	net     *dockertest.Network
	gateway string // the network's gateway: the host, as containers reach it

	bootPort   int    // boot's HTTP port published on the host's loopback
	adminToken string // the gateway's bootstrap admin token

	mu    sync.Mutex
	nodes []*natsNode
	svcs  map[string]*dockertest.Resource
}

type natsNode struct {
	name string // server_name and the container's host name: nats-1 …
	res  *dockertest.Resource
	ip   string
}

func newCluster(t testing.TB, pool *dockertest.Pool, version string) *cluster {
	t.Helper()
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	c := &cluster{t: t, pool: pool, version: version, prefix: "anvil-faults-" + hex.EncodeToString(suffix),
		dir: t.TempDir(), svcs: map[string]*dockertest.Resource{}}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	c.adminToken = "anvil_admin_" + hex.EncodeToString(tok)

	// A subnet of our own, so that a node reconnected after a partition
	// can take its old address back (Docker only assigns addresses on
	// networks with a configured subnet). Another run may hold a subnet:
	// try others.
	var err error
	var subnet string
	for attempt := 0; attempt < 30; attempt++ {
		subnet = fmt.Sprintf("10.%d.%d.0/24", 200+mrand.IntN(50), mrand.IntN(256))
		c.net, err = pool.CreateNetwork(c.prefix, func(o *dc.CreateNetworkOptions) {
			o.Driver = "bridge"
			o.IPAM = &dc.IPAMOptions{Config: []dc.IPAMConfig{{Subnet: subnet}}}
			o.Labels = map[string]string{"anvil.test/faults": c.prefix}
		})
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("creating a Docker network: %v", err)
	}
	t.Cleanup(func() {
		if err := pool.Client.RemoveNetwork(c.net.Network.ID); err != nil {
			t.Logf("removing network %s: %v", c.prefix, err)
		}
	})
	if info, err := pool.Client.NetworkInfo(c.net.Network.ID); err == nil && len(info.IPAM.Config) > 0 && info.IPAM.Config[0].Gateway != "" {
		c.gateway = info.IPAM.Config[0].Gateway
	} else {
		// Docker gives a bridge network the first address of its subnet.
		_, n, _ := net.ParseCIDR(subnet)
		ip := n.IP.To4()
		c.gateway = net.IPv4(ip[0], ip[1], ip[2], 1).String()
	}
	c.bootPort = freePort(t)
	return c
}

// mrand only picks a free Docker subnet, which the faults do not depend
// on, so it does not take ANVIL_TEST_SEED: runs side by side must draw
// different subnets.
var mrand = mathrand.New(mathrand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c *cluster) containerName(name string) string { return c.prefix + "-" + name }

// natsConf is one node's configuration: client, cluster and monitoring
// listeners, routes to all three nodes (by container name; the node skips
// its own) and JetStream on the mounted data directory.
func (c *cluster) natsConf(name string) string {
	var routes []string
	for i := 1; i <= natsNodes; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://%s:6222", c.containerName(fmt.Sprintf("nats-%d", i))))
	}
	return fmt.Sprintf(`server_name: %s
listen: 0.0.0.0:4222
http: 0.0.0.0:8222
jetstream {
  store_dir: /data
  max_memory_store: 256MB
  max_file_store: 4GB
}
cluster {
  name: anvil
  listen: 0.0.0.0:6222
  routes: [
    %s
  ]
}
`, name, strings.Join(routes, "\n    "))
}

// startNATS starts the three nodes in parallel.
func (c *cluster) startNATS() {
	c.t.Helper()
	c.nodes = make([]*natsNode, natsNodes)
	errs := make([]error, natsNodes)
	var wg sync.WaitGroup
	for i := range natsNodes {
		wg.Go(func() { c.nodes[i], errs[i] = c.runNATS(fmt.Sprintf("nats-%d", i+1)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) runNATS(name string) (*natsNode, error) {
	dir := filepath.Join(c.dir, name)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(c.natsConf(name)), 0o644); err != nil {
		return nil, err
	}
	user := ""
	if os.Getuid() == 0 {
		if err := os.Chown(data, imageUser, imageUser); err != nil {
			return nil, err
		}
	} else {
		// The data must stay removable by the test's cleanup.
		user = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	}
	res, err := c.pool.RunWithOptions(&dockertest.RunOptions{
		Name: c.containerName(name), Hostname: name,
		Repository: "anvil/nats-server", Tag: c.version,
		Cmd:       []string{"-c", "/etc/nats/nats.conf"},
		Mounts:    []string{conf + ":/etc/nats/nats.conf:ro", data + ":/data"},
		NetworkID: c.net.Network.ID,
		User:      user,
		Labels:    map[string]string{"anvil.test/faults": c.prefix},
	}, noPublish)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c.t.Cleanup(func() { c.purge(name, res) })
	n := &natsNode{name: name, res: res}
	n.ip = c.ipOf(res)
	return n, nil
}

func noPublish(hc *dc.HostConfig) {
	hc.PublishAllPorts = false
	hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
}

// purge removes a container; on failure its last log lines go to the test
// log first: the last 40 that say something (see lastTelling; a failing
// test's containers are all busy serving), and the log's last 20,000
// lines to $ANVIL_FAULTS_LOG_DIR/<prefix>-<name>.log when that is set.
func (c *cluster) purge(name string, res *dockertest.Resource) {
	if c.t.Failed() {
		all := c.logs(res.Container.ID, 20000)
		c.t.Logf("--- last lines of %s, but requests served ---\n%s", name, lastTelling(all, 40))
		if dir := os.Getenv("ANVIL_FAULTS_LOG_DIR"); dir != "" {
			path := filepath.Join(dir, c.prefix+"-"+name+".log")
			if err := errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(path, []byte(all), 0o644)); err != nil {
				c.t.Logf("saving the log of %s: %v", name, err)
			} else {
				c.t.Logf("the log of %s is in %s", name, path)
			}
		}
	}
	if err := c.pool.Purge(res); err != nil {
		c.t.Logf("removing %s: %v", name, err)
	}
}

// lastTelling is the last n lines of a log but the INFO lines of requests
// served (a success or a 4xx; the boot service logs a 5xx at WARN, with
// its answer), and of a run of the same failure only its first line.
func lastTelling(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	var telling []string
	for _, l := range lines {
		if strings.Contains(l, `"level":"INFO","msg":"request served"`) {
			continue
		}
		if k := len(telling); k > 0 && sameFailure(telling[k-1], l) {
			continue
		}
		telling = append(telling, l)
	}
	return strings.Join(telling[max(0, len(telling)-n):], "\n")
}

// sameFailure: two access-log lines with the same status and answer
// (the path differs by machine).
func sameFailure(a, b string) bool {
	type served struct {
		Msg    string `json:"msg"`
		Status int    `json:"status"`
		Answer string `json:"answer"`
	}
	var x, y served
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return x.Msg == "request served" && x == y
}

func (c *cluster) logs(id string, lines int) string {
	var buf bytes.Buffer
	err := c.pool.Client.Logs(dc.LogsOptions{Container: id, OutputStream: &buf, ErrorStream: &buf,
		Stdout: true, Stderr: true, Tail: fmt.Sprint(lines)})
	if err != nil {
		return err.Error()
	}
	return buf.String()
}

// ipOf is the container's current address on the network (it may change
// when the container is started again).
func (c *cluster) ipOf(res *dockertest.Resource) string {
	ct, err := c.pool.Client.InspectContainer(res.Container.ID)
	if err != nil {
		return ""
	}
	if n, ok := ct.NetworkSettings.Networks[c.net.Network.Name]; ok {
		return n.IPAddress
	}
	return ""
}

// natsURLs are the client URLs as containers reach them.
func (c *cluster) natsURLs() string {
	var urls []string
	for i := 1; i <= natsNodes; i++ {
		urls = append(urls, fmt.Sprintf("nats://%s:4222", c.containerName(fmt.Sprintf("nats-%d", i))))
	}
	return strings.Join(urls, ",")
}

// hostNATSURLs are the client URLs as the test process reaches them: the
// containers' addresses on the bridge.
func (c *cluster) hostNATSURLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, "nats://"+n.ip+":4222")
	}
	return strings.Join(urls, ",")
}

func (c *cluster) node(name string) *natsNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no NATS node %q", name)
	return nil
}

// catalogVersions is the revisions service's catalog: two versions the
// harness's v1.37.1 API server allows kubelets of.
const catalogVersions = "1.36.4,1.37.1"

// serviceEnv is each service's environment.
func (c *cluster) serviceEnv(name string, encryptionKey, signingKey string) []string {
	bootURL := fmt.Sprintf("http://127.0.0.1:%d", c.bootPort)
	env := []string{
		"ANVIL_NATS_URL=" + c.natsURLs(),
		"ANVIL_STREAM_REPLICAS=3",
		"ANVIL_LOG_FORMAT=json",
		"ANVIL_LOG_LEVEL=info",
		"ANVIL_" + strings.ToUpper(name) + "_ADMIN_ADDR=0.0.0.0:" + adminPort,
	}
	switch name {
	case "registry":
		env = append(env, "ANVIL_INSTANCE=registry-1")
	case "revisions":
		env = append(env, "ANVIL_REVISIONS_ENCRYPTION_KEYS="+encryptionKey,
			"ANVIL_BOOT_PUBLIC_URL="+bootURL, "ANVIL_KUBERNETES_VERSIONS="+catalogVersions)
	case "rollout":
		env = append(env, "ANVIL_INSTANCE=rollout-1", "ANVIL_ROLLOUT_LEASE_TTL=5s",
			"ANVIL_ROLLOUT_POLL=500ms", "ANVIL_ROLLOUT_REPLAN=5s")
	case "boot":
		env = append(env, "ANVIL_BOOT_ADDR=0.0.0.0:8081", "ANVIL_BOOT_PUBLIC_URL="+bootURL,
			"ANVIL_BOOT_SIGNING_KEYS="+signingKey, "ANVIL_BOOT_ASSETS_DIR=/srv/anvil",
			"ANVIL_BOOT_ASSET_BASE_URL=http://mirror.test/flatcar",
			"ANVIL_BOOT_IPXE_RETRY_INITIAL=200ms", "ANVIL_BOOT_IPXE_RETRY_MAX=1s")
	case "gateway":
		env = append(env, "ANVIL_GATEWAY_ADDR=0.0.0.0:8080", "ANVIL_ADMIN_TOKEN_HASH="+sha256Hex(c.adminToken))
	}
	return env
}

// startServices starts the five service containers in parallel and waits
// until each one's /readyz answers.
func (c *cluster) startServices(encryptionKey, signingKey string) {
	c.t.Helper()
	assets, err := simassets.Dir(c.dir, catalogVersions)
	if err != nil {
		c.t.Fatal(err)
	}
	sysext := filepath.Join(assets, "sysext")
	errs := make([]error, len(serviceNames))
	var wg sync.WaitGroup
	for i, name := range serviceNames {
		wg.Go(func() {
			opts := &dockertest.RunOptions{
				Name: c.containerName(name), Hostname: name,
				Repository: "anvil/anvil-" + name, Tag: c.version,
				Env:       c.serviceEnv(name, encryptionKey, signingKey),
				NetworkID: c.net.Network.ID,
				Labels:    map[string]string{"anvil.test/faults": c.prefix},
			}
			if name == "boot" {
				// The image carries the agent binaries (/srv/anvil/assets);
				// the Kubernetes sysexts of the catalog are the simulator's
				// stand-ins (the fleet is simulated), mounted beside them.
				opts.Mounts = []string{sysext + ":/srv/anvil/sysext:ro"}
				opts.ExposedPorts = []string{"8081/tcp"}
				opts.PortBindings = map[dc.Port][]dc.PortBinding{
					"8081/tcp": {{HostIP: "127.0.0.1", HostPort: fmt.Sprint(c.bootPort)}},
				}
			}
			// As a Deployment would, Docker starts a service that exited
			// with an error again; the tests count those restarts.
			res, err := c.pool.RunWithOptions(opts, noPublish, func(hc *dc.HostConfig) {
				hc.RestartPolicy = dc.RestartOnFailure(10)
			})
			if err != nil {
				errs[i] = fmt.Errorf("starting %s: %w", name, err)
				return
			}
			c.t.Cleanup(func() { c.purge(name, res) })
			c.mu.Lock()
			c.svcs[name] = res
			c.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	c.waitServicesReady(90 * time.Second)
}

// crashes is how often Docker has started each service again after it
// exited with an error, with the last lines it wrote.
func (c *cluster) crashes() map[string]int {
	out := map[string]int{}
	for _, name := range serviceNames {
		c.mu.Lock()
		res := c.svcs[name]
		c.mu.Unlock()
		ct, err := c.pool.Client.InspectContainer(res.Container.ID)
		if err != nil {
			continue
		}
		out[name] = ct.RestartCount
	}
	return out
}

// serviceReady asks a service's /readyz.
func (c *cluster) serviceReady(name string) error {
	c.mu.Lock()
	res := c.svcs[name]
	c.mu.Unlock()
	ip := c.ipOf(res)
	if ip == "" {
		return errors.New("no address (not running)")
	}
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(ip, adminPort) + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, oneLine(b.String()))
	}
	return nil
}

// waitServicesReady waits until every service is ready.
func (c *cluster) waitServicesReady(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for _, name := range serviceNames {
		for {
			err := c.serviceReady(name)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.mu.Lock()
				res := c.svcs[name]
				c.mu.Unlock()
				c.t.Fatalf("%s is not ready after %s: %v\n%s", name, d, err, c.logs(res.Container.ID, 40))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// restartServices kills every service container at once (SIGKILL, as a
// crash would: the images' processes get no chance to clean up) and starts
// each again, all in parallel.
func (c *cluster) restartServices(names ...string) {
	c.t.Helper()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		c.mu.Lock()
		res := c.svcs[name]
		c.mu.Unlock()
		wg.Go(func() {
			// dockertest sets SIGWINCH as the stop signal, which Go
			// programs ignore: with no grace period, restart kills.
			errs[i] = c.pool.Client.RestartContainer(res.Container.ID, 0)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

// stopNode stops a NATS node as `docker stop` does with the image's own stop
// signal: SIGTERM, then SIGKILL after 10 s; with kill, SIGKILL at once (a
// crash). It returns when the container has exited.
func (c *cluster) stopNode(n *natsNode, kill bool) {
	c.t.Helper()
	id := n.res.Container.ID
	sig := dc.SIGTERM
	if kill {
		sig = dc.SIGKILL
	}
	if err := c.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: sig}); err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.pool.Client.WaitContainerWithContext(id, ctx); err != nil {
		_ = c.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: dc.SIGKILL})
		if _, err := c.pool.Client.WaitContainer(id); err != nil {
			c.t.Fatal(err)
		}
	}
}

// startNode starts a stopped node again.
func (c *cluster) startNode(n *natsNode) {
	c.t.Helper()
	if err := c.pool.Client.StartContainer(n.res.Container.ID, nil); err != nil {
		c.t.Fatal(err)
	}
	ip := c.ipOf(n.res)
	c.mu.Lock()
	n.ip = ip
	c.mu.Unlock()
}

// disconnect cuts a node off the network; reconnect puts it back at the
// address it had, so that its peers and clients find it where they left it.
func (c *cluster) disconnect(n *natsNode) {
	c.t.Helper()
	if err := c.pool.Client.DisconnectNetwork(c.net.Network.ID, dc.NetworkConnectionOptions{Container: n.res.Container.ID, Force: true}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) reconnect(n *natsNode) {
	c.t.Helper()
	err := c.pool.Client.ConnectNetwork(c.net.Network.ID, dc.NetworkConnectionOptions{
		Container: n.res.Container.ID,
		EndpointConfig: &dc.EndpointConfig{
			IPAMConfig: &dc.EndpointIPAMConfig{IPv4Address: n.ip},
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// monitor reads a node's monitoring endpoint (path with its query).
func (c *cluster) monitor(n *natsNode, path string, into any) error {
	c.mu.Lock()
	ip := n.ip
	c.mu.Unlock()
	client := http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(ip, "8222") + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s", n.name, path, resp.Status)
	}
	return jsonDecode(resp.Body, into)
}
