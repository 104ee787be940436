package kubeharness

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// QEMUHostAddress is where a QEMU guest on user networking (slirp) reaches
// the host: its connections to 10.0.2.2:<port> arrive at the host's
// 127.0.0.1:<port>, where the API server listens.
const QEMUHostAddress = "10.0.2.2"

// Kubeadm makes the control plane one that a real `kubeadm join` can join:
// bootstrap-token authentication, Node and RBAC authorization, the
// NodeRestriction admission plugin, the bootstrapsigner and tokencleaner
// controllers, CSR approval and signing with the cluster CA, and then the
// real kubeadm's `init phase` commands that create what join reads
// (upload-config kubeadm, upload-config kubelet, bootstrap-token).
type Kubeadm struct {
	// AdvertiseHost is the address nodes use for the API server. It is put
	// into the serving certificate and into the cluster-info ConfigMap,
	// whose server URL kubeadm join and the kubelet use after discovery.
	// Default QEMUHostAddress. The harness itself never connects to it;
	// everything on this host uses 127.0.0.1. An IP address: 127.0.0.1
	// suits a join from this host.
	AdvertiseHost string
	// KubeadmPath is the kubeadm binary; default the one that
	// LoadNodeArtifacts finds.
	KubeadmPath string
	// KubeletConfiguration is the KubeletConfiguration document
	// (kubelet.config.k8s.io/v1beta1) uploaded for joining nodes, before
	// kubeadm fills in its defaults; default DefaultKubeletConfiguration.
	KubeletConfiguration string
}

// DefaultKubeletConfiguration leaves everything to kubeadm's defaults but
// the cgroup driver, which must match containerd's SystemdCgroup = true,
// and the client CA: kubeadm would fill it from this control plane's
// certificatesDir, a directory on this host that the node does not have,
// so it names where kubeadm join puts the CA on a node.
const DefaultKubeletConfiguration = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
authentication:
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
`

// WithKubeadm starts a control plane that kubeadm join works against; see
// Kubeadm. ControlPlane.Join then holds the join material.
func WithKubeadm(k Kubeadm) Option {
	return func(o *options) {
		if k.AdvertiseHost == "" {
			k.AdvertiseHost = QEMUHostAddress
		}
		if k.KubeletConfiguration == "" {
			k.KubeletConfiguration = DefaultKubeletConfiguration
		}
		o.kubeadm = &k
	}
}

// JoinInfo is what a node needs to join the control plane with kubeadm.
type JoinInfo struct {
	// APIServerEndpoint is host:port, as JoinConfiguration's
	// discovery.bootstrapToken.apiServerEndpoint takes it, with the
	// advertised host ("10.0.2.2:41234"); APIServerURL is the same as a URL
	// ("https://10.0.2.2:41234"), as anvil's cluster API endpoint takes it.
	// Use ControlPlane.Kubeconfig (127.0.0.1) for clients on this host.
	APIServerEndpoint string
	APIServerURL      string
	// Token is a bootstrap token ("abcdef.0123456789abcdef") in the group
	// system:bootstrappers:kubeadm:default-node-token, valid for 24 hours;
	// TokenID is its public part.
	Token   string
	TokenID string
	// CACertHash pins the cluster CA: "sha256:" and the hex SHA-256 of its
	// DER SubjectPublicKeyInfo, as kubeadm's caCertHashes takes it.
	CACertHash string
	CACertPEM  []byte
	// KubernetesVersion is the control plane's version, as written into the
	// kubeadm ClusterConfiguration.
	KubernetesVersion string
}

// JoinConfiguration returns a kubeadm.k8s.io/v1beta4 JoinConfiguration for
// a worker named nodeName, shaped like the one anvil renders: containerd's
// socket, no taints and no extra kubelet flags.
func (j *JoinInfo) JoinConfiguration(nodeName string) string {
	q := strconv.Quote
	return `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: ` + q(j.APIServerEndpoint) + `
    token: ` + q(j.Token) + `
    caCertHashes:
      - ` + q(j.CACertHash) + `
nodeRegistration:
  name: ` + q(nodeName) + `
  criSocket: unix:///run/containerd/containerd.sock
  taints: []
`
}

// CACertHash returns kubeadm's pin of a CA certificate:
// "sha256:<hex of SHA-256 over its SubjectPublicKeyInfo>".
func CACertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("no PEM CERTIFICATE block in the CA data")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// bootstrapToken returns a fresh token: six and sixteen characters of
// [a-z0-9], the format the API server accepts. crypto/rand, so there is no
// seed to log.
func bootstrapToken() (id, secret string, err error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	buf := make([]byte, 22)
	if _, err := rand.Read(buf); err != nil {
		return "", "", err
	}
	for i, b := range buf {
		buf[i] = alphabet[int(b)%len(alphabet)]
	}
	return string(buf[:6]), string(buf[6:]), nil
}

// kubeadmServingIPs are the extra IP SANs of the serving certificate.
func (k *Kubeadm) servingIPs() ([]net.IP, error) {
	ip := net.ParseIP(k.AdvertiseHost)
	if ip == nil {
		return nil, fmt.Errorf("kubeadm advertise host %q is not an IP address; pass one such as %s", k.AdvertiseHost, QEMUHostAddress)
	}
	return []net.IP{ip}, nil
}

// setUpKubeadm runs once the API server and controller manager are up: it
// writes the kubeadm configuration, runs the init phases that join depends
// on, points cluster-info at the advertised host and waits until the
// bootstrapsigner has signed it for the token.
func (s *starter) setUpKubeadm(ctx context.Context, apiPort int) error {
	k := s.opts.kubeadm
	kubeadm := k.KubeadmPath
	if kubeadm == "" {
		a, err := LoadNodeArtifacts()
		if err != nil {
			return err
		}
		kubeadm = a.Kubeadm
	}
	version, err := exec.CommandContext(ctx, kubeadm, "version", "-o", "short").Output()
	if err != nil {
		return fmt.Errorf("%w: %s version: %v; run `%s`", ErrNodeArtifactsMissing, kubeadm, err, NodeBuildCommand)
	}
	server, err := s.cp.Client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("asking the API server for its version: %w", err)
	}

	id, secret, err := bootstrapToken()
	if err != nil {
		return err
	}
	token := id + "." + secret
	s.cp.logger.Info("kubeadm mode", "kubeadm", strings.TrimSpace(string(version)), "server", server.GitVersion, "token_id", id)

	endpoint := net.JoinHostPort(k.AdvertiseHost, strconv.Itoa(apiPort))
	// kubeadm refuses a loopback advertise address (it reads one as "pick
	// an address on lo"); the phases below never connect to it, they use
	// --kubeconfig.
	localAdvertise := k.AdvertiseHost
	if ip := net.ParseIP(localAdvertise); ip.IsLoopback() {
		localAdvertise = kubernetesServiceIP
	}
	q := strconv.Quote
	config := `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
  - token: ` + q(token) + `
    description: kubeharness
    ttl: 24h0m0s
    usages: [signing, authentication]
    groups: [system:bootstrappers:kubeadm:default-node-token]
localAPIEndpoint:
  advertiseAddress: ` + localAdvertise + `
  bindPort: ` + strconv.Itoa(apiPort) + `
nodeRegistration:
  # Set so that kubeadm looks for no container runtime on this host.
  name: kubeharness-control-plane
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: ` + clusterName + `
kubernetesVersion: ` + q(server.GitVersion) + `
controlPlaneEndpoint: ` + q(endpoint) + `
certificatesDir: ` + q(filepath.Join(s.cp.Dir, "pki")) + `
networking:
  serviceSubnet: ` + serviceCIDR + `
  podSubnet: ` + podCIDR + `
  dnsDomain: cluster.local
---
` + k.KubeletConfiguration
	configPath := filepath.Join(s.cp.Dir, "kubeadm.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return err
	}

	// The order kubeadm init runs them in.
	for _, phase := range [][]string{
		{"upload-config", "kubeadm"},
		{"upload-config", "kubelet"},
		{"bootstrap-token", "--skip-token-print"},
	} {
		args := append([]string{"init", "phase"}, phase...)
		args = append(args, "--config", configPath, "--kubeconfig", s.cp.KubeconfigPath, "--v=1")
		if err := s.runLogged(ctx, "kubeadm", kubeadm, args...); err != nil {
			return err
		}
	}

	// kubeadm copied the admin kubeconfig's server (127.0.0.1) into
	// cluster-info. Nodes must use the advertised host instead; the
	// bootstrapsigner controller re-signs the changed content.
	advertised := "https://" + endpoint
	if err := s.cp.setClusterInfoServer(ctx, advertised); err != nil {
		return err
	}
	if err := s.cp.poll(ctx, func(ctx context.Context) (bool, error) {
		return s.cp.clusterInfoSigned(ctx, id, secret, advertised)
	}); err != nil {
		return fmt.Errorf("waiting for the bootstrapsigner controller to sign cluster-info for token %s: %w", id, err)
	}

	hash, err := CACertHash(s.pki.caCertPEM)
	if err != nil {
		return err
	}
	s.cp.Join = &JoinInfo{
		APIServerEndpoint: endpoint,
		APIServerURL:      advertised,
		Token:             token,
		TokenID:           id,
		CACertHash:        hash,
		CACertPEM:         s.pki.caCertPEM,
		KubernetesVersion: server.GitVersion,
	}
	return nil
}

// runLogged runs a short-lived program to completion, its output appended
// to logs/<name>.log, and returns an error with the output's tail.
func (s *starter) runLogged(ctx context.Context, name, bin string, args ...string) error {
	logPath := filepath.Join(s.logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(f, "### %s %s %q\n", time.Now().Format(time.RFC3339Nano), bin, args)
	err = cmd.Run()
	_, _ = f.Write(out.Bytes())
	if err != nil {
		return fmt.Errorf("%s %s: %w\n--- output ---\n%s", bin, strings.Join(args, " "), err, out.String())
	}
	return nil
}

// setClusterInfoServer rewrites the server URL of the kubeconfig in the
// kube-public/cluster-info ConfigMap.
func (cp *ControlPlane) setClusterInfoServer(ctx context.Context, server string) error {
	cms := cp.Client.CoreV1().ConfigMaps(metav1.NamespacePublic)
	for {
		cm, err := cms.Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading kube-public/cluster-info (kubeadm's bootstrap-token phase creates it): %w", err)
		}
		cfg, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
		if err != nil {
			return fmt.Errorf("kube-public/cluster-info holds no valid kubeconfig: %w", err)
		}
		changed := false
		for _, c := range cfg.Clusters {
			if c.Server != server {
				c.Server, changed = server, true
			}
		}
		if !changed {
			return nil
		}
		b, err := clientcmd.Write(*cfg)
		if err != nil {
			return err
		}
		cm.Data["kubeconfig"] = string(b)
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // the bootstrapsigner wrote a signature meanwhile
		}
		return err
	}
}

// clusterInfoSigned reports whether cluster-info names server and carries
// a valid detached JWS (HS256 keyed by the token secret) over its current
// kubeconfig, which is what kubeadm join's discovery checks.
func (cp *ControlPlane) clusterInfoSigned(ctx context.Context, id, secret, server string) (bool, error) {
	cm, err := cp.Client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	content := cm.Data["kubeconfig"]
	cfg, err := clientcmd.Load([]byte(content))
	if err != nil {
		return false, err
	}
	for _, c := range cfg.Clusters {
		if c.Server != server {
			return false, nil
		}
	}
	sig, ok := cm.Data["jws-kubeconfig-"+id]
	if !ok {
		return false, nil
	}
	return detachedJWSValid(sig, content, id, secret), nil
}

// detachedJWSValid checks a compact JWS with its payload left out
// ("header..signature"), signed with HS256.
func detachedJWSValid(sig, content, id, secret string) bool {
	header, mac, ok := strings.Cut(sig, "..")
	if !ok {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(raw, &h) != nil || h.Alg != "HS256" || h.Kid != id {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(header + "." + base64.RawURLEncoding.EncodeToString([]byte(content))))
	want := base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(want), []byte(mac))
}
