package cluster

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// MaxKubeconfigBytes bounds a kubeconfig.
const MaxKubeconfigBytes = 1 << 20

// CheckKubeconfig checks a kubeconfig the way the rollout service will use
// it (clientcmd, with no file system and no plugins of its own): it loads,
// its current context exists, names a cluster with an https server and a
// user with credentials in the kubeconfig itself. Refusing it
// here, when a cluster is created or its kubeconfig rotated, is the point:
// otherwise it fails only when a rollout first cordons a node. Reasons name
// contexts, clusters and users, never credentials or other content.
func CheckKubeconfig(kc secret.Secret) error {
	s := kc.Reveal()
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > MaxKubeconfigBytes {
		return fmt.Errorf("must be at most 1 MiB")
	}
	cfg, err := clientcmd.Load([]byte(s))
	if err != nil {
		return fmt.Errorf("is not a valid kubeconfig (%s)", loadReason(err))
	}
	if cfg.CurrentContext == "" {
		return fmt.Errorf("has no current-context: set it to the context the rollout service should use")
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return fmt.Errorf("current-context %q names no context in contexts", cfg.CurrentContext)
	}
	if ctx.Cluster == "" {
		return fmt.Errorf("context %q names no cluster", cfg.CurrentContext)
	}
	cl := cfg.Clusters[ctx.Cluster]
	if cl == nil {
		return fmt.Errorf("context %q names cluster %q, which is not in clusters", cfg.CurrentContext, ctx.Cluster)
	}
	if err := checkServer(cl.Server); err != nil {
		return fmt.Errorf("cluster %q: %v", ctx.Cluster, err)
	}
	if cl.CertificateAuthority != "" {
		return fmt.Errorf("cluster %q names a certificate-authority file, which the rollout service cannot read; embed it as certificate-authority-data", ctx.Cluster)
	}
	if ctx.AuthInfo == "" {
		return fmt.Errorf("context %q names no user", cfg.CurrentContext)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	if user == nil {
		return fmt.Errorf("context %q names user %q, which is not in users", cfg.CurrentContext, ctx.AuthInfo)
	}
	if err := checkCredentials(user); err != nil {
		return fmt.Errorf("user %q: %v", ctx.AuthInfo, err)
	}
	return nil
}

func checkServer(server string) error {
	if server == "" {
		return fmt.Errorf("has no server")
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || u.Scheme != "https" {
		return fmt.Errorf("server must be an https URL such as https://api.example.com:6443")
	}
	if u.User != nil {
		return fmt.Errorf("server must not carry credentials in its URL")
	}
	return nil
}

// checkCredentials accepts what works inside the rollout service: a token, a
// client certificate and key, or a user name and password, embedded.
func checkCredentials(u *clientcmdapi.AuthInfo) error {
	switch {
	case u.Exec != nil:
		return fmt.Errorf("runs an exec credential plugin, which the rollout service cannot run (its image holds only its own binary); use a token (e.g. a ServiceAccount's) or a client certificate")
	case u.AuthProvider != nil:
		return fmt.Errorf("uses an auth-provider plugin, which the rollout service cannot run; use a token (e.g. a ServiceAccount's) or a client certificate")
	case u.TokenFile != "":
		return fmt.Errorf("names a tokenFile, which the rollout service cannot read; embed the token")
	case u.ClientCertificate != "" || u.ClientKey != "":
		return fmt.Errorf("names client-certificate or client-key files, which the rollout service cannot read; embed them as client-certificate-data and client-key-data")
	case u.Token != "":
		return nil
	case len(u.ClientCertificateData) > 0 || len(u.ClientKeyData) > 0:
		if len(u.ClientCertificateData) == 0 || len(u.ClientKeyData) == 0 {
			return fmt.Errorf("needs both client-certificate-data and client-key-data")
		}
		return nil
	case u.Username != "" || u.Password != "":
		if u.Username == "" || u.Password == "" {
			return fmt.Errorf("needs both username and password")
		}
		return nil
	}
	return fmt.Errorf("has no credentials: needs a token, client-certificate-data and client-key-data, or username and password")
}

var (
	lineRe  = regexp.MustCompile(`line (\d+)`)
	fieldRe = regexp.MustCompile(`Go struct field ([A-Za-z0-9_.]+) of type`)
)

// loadReason says why clientcmd.Load refused, without its message, which
// may quote the content: only a line number or the path of a field of the
// wrong type.
func loadReason(err error) string {
	msg := err.Error()
	if m := fieldRe.FindStringSubmatch(msg); m != nil {
		// "NamedCluster.clusters.cluster": the type, then the JSON path.
		path := m[1]
		if _, rest, ok := strings.Cut(path, "."); ok {
			path = rest
		}
		return "field " + path + " has the wrong type"
	}
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		return "it does not parse as YAML at line " + m[1]
	}
	switch {
	case strings.Contains(msg, "illegal base64"):
		return "a -data field is not base64"
	case strings.Contains(msg, "is registered for version"):
		return "it is not apiVersion v1, kind Config"
	}
	return "it does not parse as a kubeconfig (YAML or JSON)"
}
