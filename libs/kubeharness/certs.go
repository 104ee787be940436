package kubeharness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material of one control plane. ECDSA keys keep generation
// in the microseconds, where RSA would add a noticeable share of startup.
type pki struct {
	caCertPEM    []byte
	adminCertPEM []byte // the admin credentials live only in the kubeconfig
	adminKeyPEM  []byte

	caCertPath      string
	caKeyPath       string // written only in kubeadm mode: the controller manager signs node certificates with it
	servingCertPath string
	servingKeyPath  string
	saKeyPath       string // signs service account tokens
	saPubPath       string
}

// adminUser is in system:masters, which RBAC lets do anything. Every
// component and the test client use it: the harness tests drains, not RBAC.
const (
	adminUser  = "kubeharness-admin"
	adminGroup = "system:masters"
)

// newPKI writes a fresh CA, the API server's serving certificate (valid
// for loopback, the kubernetes Service and extraIPs), the service account
// key pair and, with writeCAKey, the CA's private key.
func newPKI(dir string, extraIPs []net.IP, writeCAKey bool) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(-time.Hour) // tolerate clock skew between processes
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kubeharness-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	leaf := func(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(10 * 365 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
	}

	servingCert, servingKey, err := leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(kubernetesServiceIP)}, extraIPs...),
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	adminCert, adminKey, err := leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	p := &pki{
		caCertPEM:       pemBlock("CERTIFICATE", caDER),
		adminCertPEM:    adminCert,
		adminKeyPEM:     adminKey,
		caCertPath:      filepath.Join(dir, "ca.crt"),
		servingCertPath: filepath.Join(dir, "apiserver.crt"),
		servingKeyPath:  filepath.Join(dir, "apiserver.key"),
		saKeyPath:       filepath.Join(dir, "sa.key"),
		saPubPath:       filepath.Join(dir, "sa.pub"),
	}
	files := map[string][]byte{
		p.caCertPath:      p.caCertPEM,
		p.servingCertPath: servingCert,
		p.servingKeyPath:  servingKey,
		p.saKeyPath:       pemBlock("EC PRIVATE KEY", saKeyDER),
		p.saPubPath:       pemBlock("PUBLIC KEY", saPubDER),
	}
	if writeCAKey {
		caKeyDER, err := x509.MarshalECPrivateKey(caKey)
		if err != nil {
			return nil, err
		}
		p.caKeyPath = filepath.Join(dir, "ca.key")
		files[p.caKeyPath] = pemBlock("EC PRIVATE KEY", caKeyDER)
	}
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
