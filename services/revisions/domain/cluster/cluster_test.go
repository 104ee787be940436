package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster: {server: "https://api.prod.example:6443"}
users:
- name: anvil
  user: {token: "super-secret-drain-token"}
contexts:
- name: anvil@prod
  context: {cluster: prod, user: anvil}
current-context: anvil@prod
`

const (
	token  = "abcdef.0123456789abcdef"
	caHash = "sha256:0d6dc8d1f1c4e0b6e1d2a3c4b5a6978877665544332211aabbccddeeff001122"
)

func sealer(t *testing.T) Sealer {
	k, err := secret.NewKey("k1", bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return Sealer{Key: k, Nonces: rand.Reader}
}

func validCreate() Create {
	return Create{
		Name: "prod", APIEndpoint: "https://api.prod.example:6443", KubernetesVersion: "1.33.4",
		Kubeconfig: kubeconfig, BootstrapToken: token, CACertHash: caHash,
	}
}

func created(t *testing.T) (*Cluster, Sealer) {
	t.Helper()
	s := sealer(t)
	var c Cluster
	evs, err := c.Create(validCreate(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		c.Apply(e)
	}
	return &c, s
}

func TestCreateValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Create)
		fields []string
	}{
		{"valid", func(*Create) {}, nil},
		{"bad name", func(c *Create) { c.Name = "Prod_1" }, []string{"name"}},
		{"http endpoint", func(c *Create) { c.APIEndpoint = "http://api:6443" }, []string{"api_endpoint"}},
		{"endpoint with path", func(c *Create) { c.APIEndpoint = "https://api:6443/k8s" }, []string{"api_endpoint"}},
		{"endpoint bad port", func(c *Create) { c.APIEndpoint = "https://api:99999" }, []string{"api_endpoint"}},
		{"endpoint ipv6", func(c *Create) { c.APIEndpoint = "https://[2001:db8::1]:6443" }, nil},
		{"bad version", func(c *Create) { c.KubernetesVersion = "1.33" }, []string{"kubernetes_version"}},
		{"empty kubeconfig", func(c *Create) { c.Kubeconfig = "" }, []string{"kubeconfig"}},
		{"kubeconfig without users", func(c *Create) { c.Kubeconfig = "clusters: [{name: a}]\n" }, []string{"kubeconfig"}},
		{"bad token", func(c *Create) { c.BootstrapToken = "ABCDEF.0123456789abcdef" }, []string{"bootstrap_token"}},
		{"short token", func(c *Create) { c.BootstrapToken = "abcdef.0123" }, []string{"bootstrap_token"}},
		{"bad ca hash", func(c *Create) { c.CACertHash = "sha256:abc" }, []string{"ca_cert_hash"}},
		{"everything wrong", func(c *Create) { *c = Create{} }, []string{"name", "api_endpoint", "kubernetes_version", "kubeconfig", "bootstrap_token", "ca_cert_hash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := validCreate()
			tt.mutate(&cmd)
			var c Cluster
			_, err := c.Create(cmd, sealer(t))
			if got := errs.FieldNames(err); fmt.Sprint(got) != fmt.Sprint(tt.fields) {
				t.Fatalf("fields = %v, want %v (%v)", got, tt.fields, err)
			}
			if err != nil && (strings.Contains(err.Error(), "0123456789") || strings.Contains(err.Error(), "super-secret")) {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestCreateSealsSecrets(t *testing.T) {
	var c Cluster
	s := sealer(t)
	evs, err := c.Create(validCreate(), s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(evs)
	for _, leak := range []string{"super-secret-drain-token", "0123456789abcdef", "clusters"} {
		if strings.Contains(string(b), leak) {
			t.Fatalf("event JSON contains %q: %s", leak, b)
		}
	}
	ev := evs[0].(Created)
	if ev.BootstrapTokenID != "abcdef" || ev.EventType() != "cluster.created" {
		t.Fatalf("event = %+v", ev)
	}
	if fmt.Sprintf("%+v", validCreate()) == "" || strings.Contains(fmt.Sprintf("%+v %#v", validCreate(), validCreate()), "super-secret") {
		t.Fatal("command prints its secrets")
	}
	c.Apply(ev)
	join, err := c.OpenJoin(s.Key)
	if err != nil || join.BootstrapToken.Reveal() != token || join.CACertHash != caHash || join.APIEndpoint != "https://api.prod.example:6443" {
		t.Fatalf("OpenJoin = %+v, %v", join, err)
	}
	kc, err := c.OpenKubeconfig(s.Key)
	if err != nil || kc.Reveal() != kubeconfig {
		t.Fatalf("OpenKubeconfig: %v", err)
	}
	// Ciphertexts are bound to their field: swapping them fails to open.
	swapped := c
	swapped.BootstrapToken = c.Kubeconfig
	if _, err := swapped.OpenJoin(s.Key); err == nil {
		t.Fatal("kubeconfig ciphertext opened as the token")
	}
}

func TestLifecycle(t *testing.T) {
	c, s := created(t)
	if _, err := c.Create(validCreate(), s); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("second create: %v", err)
	}
	v := "1.33.5"
	evs, err := c.Update(Update{KubernetesVersion: &v})
	if err != nil || len(evs) != 1 {
		t.Fatalf("update = %v, %v", evs, err)
	}
	c.Apply(evs[0])
	if c.KubernetesVersion.String() != "1.33.5" {
		t.Fatalf("version = %v", c.KubernetesVersion)
	}
	if evs, err := c.Update(Update{KubernetesVersion: &v}); err != nil || len(evs) != 0 {
		t.Fatalf("no-op update = %v, %v", evs, err)
	}
	// Lowering the control plane below a pool's kubelet is refused, naming the pool.
	low := "1.32.0"
	_, err = c.Update(Update{KubernetesVersion: &low, PoolKubelets: map[string]catalog.Version{"workers": {Major: 1, Minor: 33, Patch: 4}}})
	if err == nil || !strings.Contains(err.Error(), `pool "workers"`) || !strings.Contains(err.Error(), "1.33.4") {
		t.Fatalf("skew refusal: %v", err)
	}
	evs, err = c.RotateBootstrapToken(RotateBootstrapToken{BootstrapToken: "zyxwvu.zyxwvutsrqponmlk"}, s)
	if err != nil {
		t.Fatal(err)
	}
	rotated := evs[0].(BootstrapTokenRotated)
	c.Apply(&rotated) // pointers fold too
	if j, _ := c.OpenJoin(s.Key); j.BootstrapToken.Reveal() != "zyxwvu.zyxwvutsrqponmlk" || c.BootstrapTokenID != "zyxwvu" {
		t.Fatal("token not rotated")
	}
	if _, err := c.RotateKubeconfig(RotateKubeconfig{Kubeconfig: "nope"}, s); !errs.Is(err, errs.KindValidation) {
		t.Fatalf("bad kubeconfig: %v", err)
	}
	if _, err := c.Delete(Delete{Pools: 2}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("delete with pools: %v", err)
	}
	evs, _ = c.Delete(Delete{})
	c.Apply(evs[0])
	c.Apply(struct{}{}) // unknown events are ignored
	if c.Exists() {
		t.Fatal("still exists")
	}
	if _, err := c.Update(Update{}); !errs.Is(err, errs.KindConflict) {
		t.Fatalf("update after delete: %v", err)
	}
	var none Cluster
	if _, err := none.Update(Update{}); !errs.Is(err, errs.KindNotFound) {
		t.Fatalf("update of nothing: %v", err)
	}
}

func TestJoinEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.example":        "api.example:443",
		"https://api.example:6443":   "api.example:6443",
		"https://[2001:db8::1]:6443": "[2001:db8::1]:6443",
		"https://10.0.0.1:6443/":     "10.0.0.1:6443",
	} {
		if got, err := JoinEndpoint(in); err != nil || got != want {
			t.Errorf("JoinEndpoint(%q) = %q, %v", in, got, err)
		}
	}
}

func TestEventTypes(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range EventTypes() {
		name := e.(interface{ EventType() string }).EventType()
		if !strings.HasPrefix(name, "cluster.") || seen[name] {
			t.Errorf("event type %q", name)
		}
		seen[name] = true
	}
}
