package kubeharness_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// The real kubeadm's join discovery, run on this host against a kubeadm
// mode control plane that advertises 127.0.0.1, finds the cluster with the
// bootstrap token and the CA pin and reads the kubeadm and kubelet
// configuration; a wrong pin or a wrong token secret is refused. Then a
// TLS-bootstrap CSR made with the token, as a kubelet makes it, is
// approved and signed, and the certificate works as the node's identity,
// confined to its own Node by NodeRestriction.
func TestKubeadmJoinDiscoveryAndTLSBootstrap(t *testing.T) {
	t.Parallel()
	nodeArtifacts := kubeharness.RequireNodeArtifacts(t)
	cp := kubeharness.Start(t, kubeharness.WithKubeadm(kubeharness.Kubeadm{
		AdvertiseHost: "127.0.0.1",
		KubeadmPath:   nodeArtifacts.Kubeadm,
	}))
	ctx := t.Context()
	join := cp.Join
	if join == nil {
		t.Fatal("ControlPlane.Join is nil in kubeadm mode")
	}
	t.Logf("join endpoint %s, token id %s, CA hash %s", join.APIServerEndpoint, join.TokenID, join.CACertHash)
	if want := strings.TrimPrefix(cp.RESTConfig().Host, "https://"); join.APIServerEndpoint != want {
		t.Fatalf("APIServerEndpoint = %q, want %q (AdvertiseHost 127.0.0.1)", join.APIServerEndpoint, want)
	}

	// kubeadm computes the same CA pin from the admin kubeconfig.
	out := runKubeadm(t, nodeArtifacts, "token", "create", "--print-join-command", "--kubeconfig", cp.KubeconfigPath)
	if !strings.Contains(out, "--discovery-token-ca-cert-hash "+join.CACertHash) {
		t.Fatalf("kubeadm token create --print-join-command printed %q, want the CA hash %s", out, join.CACertHash)
	}

	dir := t.TempDir()
	// The node name is one /etc/hosts resolves: the (ignored) hostname
	// check looks it up, and no lookup should leave this host.
	joinYAML := join.JoinConfiguration("localhost") + "timeouts:\n  discovery: 1m0s\n"
	discover := func(name, config string) (string, error) {
		path := filepath.Join(dir, name)
		must(t, os.WriteFile(path, []byte(config), 0o600))
		// preflight runs the node checks (ignored: this host is no
		// node) and then the real discovery and configuration fetch.
		cmd := exec.CommandContext(ctx, nodeArtifacts.Kubeadm, "join", "phase", "preflight",
			"--config", path, "--ignore-preflight-errors=all", "--v=1")
		cmd.Env = append(os.Environ(), "PATH="+nodeArtifacts.Dir+":"+os.Getenv("PATH"), "KUBECONFIG=")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	out, err := discover("join.yaml", joinYAML)
	if err != nil {
		t.Fatalf("kubeadm join phase preflight: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "[discovery]") || strings.Contains(line, "[WARNING") {
			t.Log("kubeadm: " + line)
		}
	}
	for _, want := range []string{
		"Cluster info signature and contents are valid and TLS certificate validates against pinned roots",
		"Retrieving KubeConfig objects",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubeadm join phase preflight output lacks %q:\n%s", want, out)
		}
	}

	wrongPin := strings.Replace(joinYAML, join.CACertHash, "sha256:"+strings.Repeat("0", 64), 1)
	if out, err := discover("wrong-pin.yaml", wrongPin); err == nil || !strings.Contains(out, "none of the public keys") {
		t.Errorf("discovery with a wrong CA pin: err = %v, want a refusal naming the pinned keys:\n%s", err, out)
	}
	wrongSecret := strings.Replace(joinYAML, join.Token, join.TokenID+".0123456789abcdef", 1)
	if out, err := discover("wrong-secret.yaml", wrongSecret); err == nil || !strings.Contains(out, "failed to verify JWS signature") {
		t.Errorf("discovery with a wrong token secret: err = %v, want a JWS refusal:\n%s", err, out)
	}

	// The kubelet's TLS bootstrap: a CSR for system:node:<name> under the
	// bootstrap token's identity.
	bootstrap := rest.CopyConfig(cp.RESTConfig())
	bootstrap.TLSClientConfig = rest.TLSClientConfig{CAData: join.CACertPEM}
	bootstrap.BearerToken = join.Token
	bootstrapClient, err := kubernetes.NewForConfig(bootstrap)
	must(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:vm-1", Organization: []string{"system:nodes"}},
	}, key)
	must(t, err)
	csr, err := bootstrapClient.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	must(t, err)
	if csr.Spec.Username != "system:bootstrap:"+join.TokenID ||
		!slices.Contains(csr.Spec.Groups, "system:bootstrappers") ||
		!slices.Contains(csr.Spec.Groups, "system:bootstrappers:kubeadm:default-node-token") {
		t.Fatalf("CSR requested as %q in %v, want system:bootstrap:%s in system:bootstrappers", csr.Spec.Username, csr.Spec.Groups, join.TokenID)
	}

	waitCtx, cancel := context.WithTimeout(ctx, kubeharness.DefaultWaitTimeout)
	defer cancel()
	err = wait.PollUntilContextCancel(waitCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		csr, err = bootstrapClient.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		return err == nil && len(csr.Status.Certificate) > 0, err
	})
	if err != nil {
		t.Fatalf("CSR %s was not approved and signed: %v (status %+v)", csr.Name, err, csr.Status)
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		approved = approved || (c.Type == certificatesv1.CertificateApproved && c.Reason == "AutoApproved")
	}
	if !approved {
		t.Errorf("CSR conditions = %+v, want Approved by the csrapproving controller (AutoApproved)", csr.Status.Conditions)
	}
	block, _ := pem.Decode(csr.Status.Certificate)
	if block == nil {
		t.Fatalf("CSR certificate is not PEM: %q", csr.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	must(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(join.CACertPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the signed certificate does not chain to the cluster CA as a client certificate: %v", err)
	}
	if cert.Subject.CommonName != "system:node:vm-1" {
		t.Fatalf("certificate subject = %v", cert.Subject)
	}

	// As the node: register itself, and nothing else.
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	asNode := rest.CopyConfig(cp.RESTConfig())
	asNode.TLSClientConfig = rest.TLSClientConfig{
		CAData:   join.CACertPEM,
		CertData: csr.Status.Certificate,
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	nodeClient, err := kubernetes.NewForConfig(asNode)
	must(t, err)
	_, err = nodeClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-1"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = nodeClient.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vm-2"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node vm-1 creating node vm-2: err = %v, want Forbidden (NodeRestriction)", err)
	}
	must(t, err1(cp.Client.CoreV1().Nodes().Get(ctx, "vm-1", metav1.GetOptions{})))
}

// By default the control plane is set up for a QEMU guest: the serving
// certificate is valid for 10.0.2.2 and cluster-info sends nodes there.
// Nothing connects to 10.0.2.2; the certificate is read from 127.0.0.1.
func TestKubeadmAdvertisesQEMUHostAddress(t *testing.T) {
	t.Parallel()
	nodeArtifacts := kubeharness.RequireNodeArtifacts(t)
	cp := kubeharness.Start(t, kubeharness.WithKubeadm(kubeharness.Kubeadm{KubeadmPath: nodeArtifacts.Kubeadm}))
	ctx := t.Context()
	join := cp.Join

	local, err := url.Parse(cp.RESTConfig().Host)
	must(t, err)
	want := net.JoinHostPort(kubeharness.QEMUHostAddress, local.Port())
	if join.APIServerEndpoint != want || join.APIServerURL != "https://"+want {
		t.Fatalf("join endpoint %q, URL %q; want %q", join.APIServerEndpoint, join.APIServerURL, want)
	}
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(join.Token) || !strings.HasPrefix(join.Token, join.TokenID+".") {
		t.Fatalf("token %q (id %q) is not a bootstrap token", join.Token, join.TokenID)
	}
	if got, err := kubeharness.CACertHash(join.CACertPEM); err != nil || got != join.CACertHash {
		t.Fatalf("CACertHash = %q, %v; want %q", got, err, join.CACertHash)
	}

	cm, err := cp.Client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	must(t, err)
	cfg, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	must(t, err)
	for name, c := range cfg.Clusters {
		if c.Server != join.APIServerURL {
			t.Errorf("cluster-info cluster %q server = %q, want %q", name, c.Server, join.APIServerURL)
		}
	}
	if cm.Data["jws-kubeconfig-"+join.TokenID] == "" {
		t.Errorf("cluster-info has no signature for token %s: %v", join.TokenID, cm.Data)
	}
	for _, name := range []string{"kubeadm-config", "kubelet-config"} {
		if _, err := cp.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("kube-system/%s: %v", name, err)
		}
	}
	// The bootstrap token's Secret, as kubeadm wrote it.
	secret, err := cp.Client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, "bootstrap-token-"+join.TokenID, metav1.GetOptions{})
	must(t, err)
	if string(secret.Data["usage-bootstrap-authentication"]) != "true" || string(secret.Data["usage-bootstrap-signing"]) != "true" {
		t.Errorf("bootstrap token secret data = %v", secret.Data)
	}

	conn, err := tls.Dial("tcp", local.Host, &tls.Config{InsecureSkipVerify: true}) // read only, verified below
	must(t, err)
	serving := conn.ConnectionState().PeerCertificates[0]
	must(t, conn.Close())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(join.CACertPEM)
	for _, host := range []string{kubeharness.QEMUHostAddress, "127.0.0.1", "localhost"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate is not valid for %s: %v", host, err)
		}
	}
}

func runKubeadm(t *testing.T, a *kubeharness.NodeArtifacts, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), a.Kubeadm, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
