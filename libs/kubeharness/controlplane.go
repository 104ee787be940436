package kubeharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Component names, as accepted by WithArgs and used for log file names.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kwok                  = "kwok"
)

const (
	serviceCIDR         = "10.96.0.0/16"
	kubernetesServiceIP = "10.96.0.1"
	podCIDR             = "10.244.0.0/16"
	clusterName         = "kubeharness"
)

// ControlPlane is a running etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, all on loopback. Nodes exist only as objects that
// kwok keeps alive; see CreateNode.
type ControlPlane struct {
	// Dir holds the certificates, etcd's data, and logs/<component>.log.
	Dir string
	// Kubeconfig is an admin kubeconfig with the credentials embedded;
	// KubeconfigPath is the same file on disk, for programs and kubectl.
	Kubeconfig     []byte
	KubeconfigPath string
	// Client is an admin clientset.
	Client kubernetes.Interface
	// StartupDuration is how long StartProcess took, for reports.
	StartupDuration time.Duration
	// Join is the kubeadm join material; nil unless started WithKubeadm.
	Join *JoinInfo

	restConfig *rest.Config
	procs      []*process // in start order
	logger     *slog.Logger

	stopOnce sync.Once
	stopErr  error
}

// RESTConfig returns a copy of the admin client configuration, so callers
// may change it freely.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.restConfig) }

// Option changes how a control plane starts.
type Option func(*options)

type options struct {
	binDir       string
	startTimeout time.Duration
	extraArgs    map[string][]string
	extraEnv     map[string][]string
	logger       *slog.Logger
	kubeadm      *Kubeadm
	// nodeLease is the lease duration of the nodes kwok keeps (0: 40 s).
	nodeLease time.Duration
}

// WithBinDir uses binaries from dir instead of BinDir().
func WithBinDir(dir string) Option { return func(o *options) { o.binDir = dir } }

// WithStartTimeout bounds StartProcess (default 2 minutes: on a shared
// 2-core machine under load, a start that takes 3s idle has taken 25s).
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithArgs appends flags to one component's command line. They come after
// the harness's own flags, so they win where a flag is given twice.
func WithArgs(component string, args ...string) Option {
	return func(o *options) { o.extraArgs[component] = append(o.extraArgs[component], args...) }
}

// WithEnv adds environment variables ("NAME=value") to one component's
// environment, which is otherwise this process's. GOGC=400, say, trades
// the component's memory for the CPU its garbage collector takes from
// what the test measures on the same cores.
func WithEnv(component string, vars ...string) Option {
	return func(o *options) { o.extraEnv[component] = append(o.extraEnv[component], vars...) }
}

// WithNodeLeaseDuration sets the lease duration of the nodes kwok keeps
// (default 40 s, a kubelet's): kwok renews each lease every quarter of it,
// and the controller manager's node-monitor grace period becomes five
// renewals, as 50 s is to 40 s by default. Fleets of thousands of nodes on
// a small machine take it longer: 10,000 kubelets renewing every 10 s are
// 1,000 lease writes a second, which a production cluster's control plane
// carries but a test's, sharing two cores with what it tests, does not.
//
// d must be whole seconds, at least 4 s; Start fails otherwise.
func WithNodeLeaseDuration(d time.Duration) Option { return func(o *options) { o.nodeLease = d } }

// WithLogger receives the harness's progress messages (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// StartProcess starts a control plane whose files live in dir, for programs
// that are not tests (a demo, say). The caller must call Stop. ctx bounds the
// startup only; the processes run until Stop.
func StartProcess(ctx context.Context, dir string, opts ...Option) (_ *ControlPlane, err error) {
	begin := time.Now()
	o := options{startTimeout: 2 * time.Minute, extraArgs: map[string][]string{}, extraEnv: map[string][]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// kwok takes whole seconds and renews at a quarter: under 4 s a
	// lease would be renewed constantly or, under 1 s, not at all.
	if o.nodeLease != 0 && (o.nodeLease < 4*time.Second || o.nodeLease%time.Second != 0) {
		return nil, fmt.Errorf("WithNodeLeaseDuration(%s): must be whole seconds, at least 4s", o.nodeLease)
	}
	binDir := o.binDir
	if binDir == "" {
		if binDir, err = BinDir(); err != nil {
			return nil, err
		}
	} else if err := checkBinaries(binDir); err != nil {
		return nil, fmt.Errorf("%w in %s: %v", ErrBinariesMissing, binDir, err)
	}

	ctx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()

	cp := &ControlPlane{Dir: dir, logger: o.logger}
	defer func() {
		if err != nil {
			if stopErr := cp.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	s := &starter{cp: cp, binDir: binDir, opts: o, logDir: filepath.Join(dir, "logs")}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	cp.StartupDuration = time.Since(begin)
	cp.logger.Info("control plane ready", "dir", dir, "took", cp.StartupDuration.Round(time.Millisecond))
	return cp, nil
}

// Stop stops every component, newest first, and reports any process that
// could not be ended. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		var errs []error
		for i := len(cp.procs) - 1; i >= 0; i-- {
			if err := cp.procs[i].stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// PIDs returns each component's process id, which is also its process
// group id.
func (cp *ControlPlane) PIDs() map[string]int {
	pids := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	return pids
}

// LogTails returns the last lines of every component's log, for failure
// reports.
func (cp *ControlPlane) LogTails(lines int) string {
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", lines, p.logPath, p.tail(lines))
	}
	return b.String()
}

// checkAlive returns an error naming the first component that has exited.
func (cp *ControlPlane) checkAlive() error {
	for _, p := range cp.procs {
		if gone, err := p.exited(); gone {
			return fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.logPath, p.tail(30))
		}
	}
	return nil
}

type starter struct {
	cp     *ControlPlane
	binDir string
	opts   options
	logDir string
	pki    *pki
}

func (s *starter) start(ctx context.Context) error {
	dir := s.cp.Dir
	for _, d := range []string{s.logDir, filepath.Join(dir, "etcd"), filepath.Join(dir, "kwok-home")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	var extraIPs []net.IP
	if k := s.opts.kubeadm; k != nil {
		ips, err := k.servingIPs()
		if err != nil {
			return err
		}
		extraIPs = ips
	}
	var err error
	if s.pki, err = newPKI(filepath.Join(dir, "pki"), extraIPs, s.opts.kubeadm != nil); err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}

	etcdPort, err := s.launch(ctx, Etcd, 2, s.etcdArgs, s.etcdHealthy)
	if err != nil {
		return err
	}
	apiPort, err := s.launch(ctx, KubeAPIServer, 1,
		func(ports []int) []string { return s.apiserverArgs(etcdPort[0], ports[0]) },
		s.apiserverReady)
	if err != nil {
		return err
	}

	// These three only talk to the API server, so they need no ports and
	// can start together.
	schedCfg, kwokCfg, err := s.writeComponentConfigs(ctx)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{KubeControllerManager, s.controllerManagerArgs()},
		{KubeScheduler, []string{"--config=" + schedCfg, "--secure-port=0"}},
		{Kwok, s.kwokArgs(kwokCfg)},
	} {
		if _, err := s.launch(ctx, c.name, 0, func([]int) []string { return c.args }, nil); err != nil {
			return err
		}
	}

	// The service account controller runs in kube-controller-manager, and
	// pods cannot be created before their namespace has its default account.
	if err := s.cp.poll(ctx, func(ctx context.Context) (bool, error) {
		_, err := s.cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return err
	}
	if s.opts.kubeadm != nil {
		return s.setUpKubeadm(ctx, apiPort[0])
	}
	return nil
}

// launch starts a component on nPorts fresh loopback ports and waits until
// ready returns nil. Free ports are found by binding and releasing them, so
// a parallel test can take one first; a component that dies of that is
// started again on new ports.
func (s *starter) launch(ctx context.Context, name string, nPorts int,
	args func(ports []int) []string, ready func(ctx context.Context, ports []int) error,
) ([]int, error) {
	env := os.Environ()
	if name == Kwok {
		// kwok also reads ~/.kwok/kwok.yaml; keep a developer's file out.
		env = append(env, "HOME="+filepath.Join(s.cp.Dir, "kwok-home"))
	}
	env = append(env, s.opts.extraEnv[name]...)
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nPorts)
		if err != nil {
			return nil, err
		}
		fullArgs := append(args(ports), s.opts.extraArgs[name]...)
		p, err := startProcess(name, filepath.Join(s.binDir, name), fullArgs, s.logDir, env)
		if err != nil {
			return nil, err
		}
		started := time.Now()
		s.cp.procs = append(s.cp.procs, p)
		s.cp.logger.Debug("started", "component", name, "pid", p.cmd.Process.Pid, "ports", ports)
		if ready == nil {
			return ports, nil
		}
		var lastErr error
		err = s.cp.poll(ctx, func(ctx context.Context) (bool, error) {
			lastErr = ready(ctx, ports)
			return lastErr == nil, nil
		})
		if err == nil {
			s.cp.logger.Debug("ready", "component", name, "took", time.Since(started).Round(time.Millisecond))
			return ports, nil
		}
		if attempt < 3 && strings.Contains(p.tail(50), "address already in use") {
			s.cp.logger.Info("port taken, retrying", "component", name, "ports", ports)
			s.cp.procs = s.cp.procs[:len(s.cp.procs)-1]
			_ = p.stop(5 * time.Second)
			continue
		}
		if lastErr != nil {
			err = fmt.Errorf("%w (last probe: %v)", err, lastErr)
		}
		return nil, fmt.Errorf("%s did not become ready: %w\n--- last lines of %s ---\n%s", name, err, p.logPath, p.tail(30))
	}
}

// poll calls cond until it returns true or an error, a component exits, or
// ctx ends.
func (cp *ControlPlane) poll(ctx context.Context, cond func(context.Context) (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := cp.checkAlive(); err != nil {
			return err
		}
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *starter) etcdArgs(ports []int) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	return []string{
		"--name=" + clusterName,
		"--data-dir=" + filepath.Join(s.cp.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + clusterName + "=" + peer,
		// The data is thrown away with the test; durability only costs time.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

func (s *starter) etcdHealthy(ctx context.Context, ports []int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/health", ports[0]), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}

func (s *starter) apiserverArgs(etcdPort, port int) []string {
	p := s.pki
	authorization := "--authorization-mode=RBAC"
	var kubeadmArgs []string
	if s.opts.kubeadm != nil {
		// What a kubeadm control plane runs with, so that kubelets can
		// bootstrap and are confined to their own node.
		authorization = "--authorization-mode=Node,RBAC"
		kubeadmArgs = []string{"--enable-bootstrap-token-auth=true", "--enable-admission-plugins=NodeRestriction"}
	}
	return append([]string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--cert-dir=" + filepath.Join(s.cp.Dir, "pki"),
		"--tls-cert-file=" + p.servingCertPath,
		"--tls-private-key-file=" + p.servingKeyPath,
		"--client-ca-file=" + p.caCertPath,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubPath,
		"--service-account-signing-key-file=" + p.saKeyPath,
		"--service-cluster-ip-range=" + serviceCIDR,
		authorization,
		"--allow-privileged=true",
		// A loopback address is not a valid endpoint, and nothing here
		// reaches the API server through the kubernetes Service anyway.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, kubeadmArgs...)
}

func (s *starter) apiserverReady(ctx context.Context, ports []int) error {
	if s.cp.restConfig == nil || !strings.HasSuffix(s.cp.restConfig.Host, fmt.Sprintf(":%d", ports[0])) {
		if err := s.cp.setClient(s.pki, fmt.Sprintf("https://127.0.0.1:%d", ports[0])); err != nil {
			return err
		}
	}
	_, err := s.cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Raw()
	return err
}

// setClient writes the admin kubeconfig for server and builds the clients.
func (cp *ControlPlane) setClient(p *pki, server string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.caCertPEM}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: p.adminCertPEM, ClientKeyData: p.adminKeyPEM}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: adminUser, Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = clusterName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(cp.Dir, "kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		return err
	}
	// Tests create objects in bursts; client-side throttling would only
	// make them slower, not more realistic.
	rc.QPS, rc.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	cp.Kubeconfig, cp.KubeconfigPath, cp.restConfig, cp.Client = b, path, rc, client
	return nil
}

func (s *starter) controllerManagerArgs() []string {
	// The default set includes what the harness relies on: disruption
	// (PDB status), deployment, replicaset, namespace, garbagecollector,
	// serviceaccount, nodelifecycle and podgc.
	controllers := "*"
	var kubeadmArgs []string
	if s.opts.kubeadm != nil {
		// Off by default: they sign cluster-info for each bootstrap token
		// and delete expired tokens.
		controllers = "*,bootstrapsigner,tokencleaner"
		// The csrsigning controller signs node client certificates with
		// the cluster CA once csrapproving has approved them.
		kubeadmArgs = []string{
			"--cluster-signing-cert-file=" + s.pki.caCertPath,
			"--cluster-signing-key-file=" + s.pki.caKeyPath,
		}
	}
	return append([]string{
		"--kubeconfig=" + s.cp.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + controllers,
		"--service-account-private-key-file=" + s.pki.saKeyPath,
		"--root-ca-file=" + s.pki.caCertPath,
		"--cluster-name=" + clusterName,
		fmt.Sprintf("--node-monitor-grace-period=%ds", int(s.nodeLease().Seconds()*5/4)),
	}, kubeadmArgs...)
}

func (s *starter) nodeLease() time.Duration {
	if s.opts.nodeLease > 0 {
		return s.opts.nodeLease
	}
	return 40 * time.Second
}

func (s *starter) kwokArgs(config string) []string {
	return []string{
		"--kubeconfig=" + s.cp.KubeconfigPath,
		"--config=" + config,
		// Only nodes that CreateNode labels are kwok's; removing the label
		// is how SetNodeNotReady takes a node away from it. A label (not an
		// annotation) matters: the API server filters label selectors, so
		// kwok sees the node leave its selection.
		"--manage-nodes-with-label-selector=" + KwokManagedLabel + "=true",
		// Leases are how kube-controller-manager judges node health; without
		// them every node turns NotReady after the grace period.
		fmt.Sprintf("--node-lease-duration-seconds=%d", int(s.nodeLease().Seconds())),
		"--cidr=" + podCIDR,
	}
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Held until all are chosen so the n ports differ from each other.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
