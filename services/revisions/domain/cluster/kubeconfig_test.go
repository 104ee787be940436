package cluster

import (
	"encoding/base64"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// kc builds a kubeconfig around one cluster, user and context; each part
// is YAML at the indentation of a list item's fields.
func kc(cluster, user, context, current string) string {
	return "apiVersion: v1\nkind: Config\n" +
		"clusters:\n- name: prod\n  cluster:\n" + cluster +
		"users:\n- name: drain\n  user:\n" + user +
		"contexts:\n- name: drain@prod\n  context:\n" + context +
		current
}

const (
	server   = "    server: https://api.prod.example:6443\n"
	caData   = "    certificate-authority-data: " + "LS0tLS1CRUdJTi1DRVJUSUZJQ0FURS0tLS0tCg==" + "\n"
	tokenU   = "    token: super-secret-drain-token\n"
	both     = "    cluster: prod\n    user: drain\n"
	current  = "current-context: drain@prod\n"
	certData = "    client-certificate-data: " + "Y2VydC1zdXBlci1zZWNyZXQ=" + "\n"
	keyData  = "    client-key-data: " + "a2V5LXN1cGVyLXNlY3JldA==" + "\n"
)

func TestCheckKubeconfig(t *testing.T) {
	tests := []struct {
		name   string
		kc     string
		reason string // a part of the refusal; empty: accepted
	}{
		{"token", kc(server, tokenU, both, current), ""},
		{"token and CA", kc(server+caData, tokenU, both, current), ""},
		{"insecure skip verify", kc(server+"    insecure-skip-tls-verify: true\n", tokenU, both, current), ""},
		{"client certificate", kc(server+caData, certData+keyData, both, current), ""},
		{"basic auth", kc(server, "    username: drain\n    password: super-secret-pw\n", both, current), ""},
		{"JSON", `{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://10.0.0.1"}}],` +
			`"users":[{"name":"u","user":{"token":"super-secret-json"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`, ""},
		{"the test fixture", kubeconfig, ""},

		{"empty", "", "must not be empty"},
		{"blank", " \n\t", "must not be empty"},
		{"too large", kc(server, tokenU, both, current) + "# " + strings.Repeat("x", MaxKubeconfigBytes), "at most 1 MiB"},
		{"not YAML", "clusters: [\n  - name: prod\n  cluster: {server: super-secret-yaml", "does not parse as YAML at line"},
		{"a list", "- super-secret-list\n- b\n", "does not parse as a kubeconfig"},
		{"a Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: super-secret-pod}\n", "not apiVersion v1, kind Config"},
		{"token of the wrong type", "users:\n- name: u\n  user: {token: [super-secret]}\n", "field users.user.token has the wrong type"},
		{"CA not base64", kc(server+"    certificate-authority-data: not-base64-super-secret\n", tokenU, both, current), "not base64"},
		{"clusters as a map", "clusters: {prod: {server: super-secret-map}}\n", "field clusters has the wrong type"},
		{"no contexts", strings.TrimSuffix(kc(server, tokenU, "", ""), "contexts:\n- name: drain@prod\n  context:\n"), "has no current-context"},
		{"no current context", kc(server, tokenU, both, ""), "has no current-context"},
		{"current context missing", kc(server, tokenU, both, "current-context: elsewhere\n"), `current-context "elsewhere" names no context`},
		{"context without cluster", kc(server, tokenU, "    user: drain\n", current), `context "drain@prod" names no cluster`},
		{"context names an unknown cluster", kc(server, tokenU, "    cluster: staging\n    user: drain\n", current), `names cluster "staging", which is not in clusters`},
		{"no server", kc("    insecure-skip-tls-verify: true\n", tokenU, both, current), `cluster "prod": has no server`},
		{"server not a URL", kc("    server: api.prod.example:6443\n", tokenU, both, current), "server must be an https URL"},
		{"plain http server", kc("    server: http://api.prod.example:8080\n", tokenU, both, current), "server must be an https URL"},
		{"credentials in the server URL", kc("    server: https://drain:super-secret-url@api.prod.example\n", tokenU, both, current), "must not carry credentials"},
		{"CA file", kc(server+"    certificate-authority: /etc/kubernetes/pki/ca.crt\n", tokenU, both, current), "certificate-authority-data"},
		{"context without user", kc(server, tokenU, "    cluster: prod\n", current), `context "drain@prod" names no user`},
		{"context names an unknown user", kc(server, tokenU, "    cluster: prod\n    user: admin\n", current), `names user "admin", which is not in users`},
		{"no credentials", kc(server, "    {}\n", both, current), `user "drain": has no credentials`},
		{"exec plugin", kc(server, "    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, args: [eks, get-token]}\n", both, current), "exec credential plugin"},
		{"auth provider", kc(server, "    auth-provider: {name: oidc, config: {id-token: super-secret-oidc}}\n", both, current), "auth-provider"},
		{"token file", kc(server, "    tokenFile: /var/run/secrets/token\n", both, current), "tokenFile"},
		{"client certificate files", kc(server, "    client-certificate: /a.crt\n    client-key: /a.key\n", both, current), "client-certificate-data and client-key-data"},
		{"certificate without key", kc(server, certData, both, current), "needs both client-certificate-data and client-key-data"},
		{"user without password", kc(server, "    username: drain\n", both, current), "needs both username and password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKubeconfig(secret.Secret(tt.kc))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				// What is accepted is what the rollout service can use.
				if _, err := clientcmd.RESTConfigFromKubeConfig([]byte(tt.kc)); err != nil {
					t.Fatalf("accepted, but clientcmd cannot build a client from it: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want a refusal saying %q", tt.reason)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("refusal %q does not say %q", err, tt.reason)
			}
			if strings.Contains(err.Error(), "super-secret") || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("refusal quotes the content: %v", err)
			}
		})
	}
}

// TestKubeconfigRefusalsNameTheField: creating a cluster and rotating its
// kubeconfig both refuse with a validation problem on field kubeconfig.
func TestKubeconfigRefusalsNameTheField(t *testing.T) {
	noContext := "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster: {server: 'https://api.prod.example:6443'}\n" +
		"users:\n- name: drain\n  user: {token: super-secret-drain-token}\n"
	cmd := validCreate()
	cmd.Kubeconfig = secret.Secret(noContext)
	var fresh Cluster
	_, err := fresh.Create(cmd, sealer(t))
	if got := errs.FieldNames(err); len(got) != 1 || got[0] != "kubeconfig" || !errs.Is(err, errs.KindValidation) {
		t.Fatalf("create: fields %v (%v)", got, err)
	}
	if !strings.Contains(err.Error(), "kubeconfig: has no current-context") {
		t.Errorf("create: %v", err)
	}

	c, s := created(t)
	_, err = c.RotateKubeconfig(RotateKubeconfig{Kubeconfig: secret.Secret(noContext)}, s)
	if got := errs.FieldNames(err); len(got) != 1 || got[0] != "kubeconfig" || !errs.Is(err, errs.KindValidation) {
		t.Fatalf("rotate: fields %v (%v)", got, err)
	}
	good := strings.Replace(kubeconfig, "super-secret-drain-token", "rotated-token", 1)
	evs, err := c.RotateKubeconfig(RotateKubeconfig{Kubeconfig: secret.Secret(good)}, s)
	if err != nil || len(evs) != 1 {
		t.Fatalf("rotate to a valid kubeconfig: %v, %v", evs, err)
	}
	c.Apply(evs[0])
	if got, err := c.OpenKubeconfig(s.Key); err != nil || got.Reveal() != good {
		t.Fatalf("rotated kubeconfig: %v", err)
	}
	for _, leak := range []string{"super-secret", base64.StdEncoding.EncodeToString([]byte("super-secret"))} {
		if err := CheckKubeconfig(secret.Secret(noContext)); strings.Contains(err.Error(), leak) {
			t.Errorf("refusal quotes the content: %v", err)
		}
	}
}
