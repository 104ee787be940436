package cluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/services/revisions/domain/secret"
)

// FuzzCreate: no panics, and whatever is accepted never reaches the event
// in plaintext.
func FuzzCreate(f *testing.F) {
	f.Add("prod", "https://api.prod.example:6443", "1.33.4", kubeconfig, token, caHash)
	f.Add("x", "https://[::1]", "v1.2.3", "clusters: [1]\nusers: [2]", "aaaaaa.bbbbbbbbbbbbbbbb", "sha256:"+strings.Repeat("F", 64))
	f.Add("", "https://u:p@h/x?y#z", "1.33", "{", "a.b", "sha256:")
	f.Fuzz(func(t *testing.T, name, endpoint, version, kc, tok, ca string) {
		var c Cluster
		evs, err := c.Create(Create{Name: name, APIEndpoint: endpoint, KubernetesVersion: version, Kubeconfig: secret.Secret(kc), BootstrapToken: secret.Secret(tok), CACertHash: ca}, sealer(t))
		if err != nil {
			return
		}
		b, _ := json.Marshal(evs)
		if strings.Contains(string(b), tok) || (len(kc) > 8 && strings.Contains(string(b), kc)) {
			t.Fatal("secret in event")
		}
		c.Apply(evs[0])
		if _, err := JoinEndpoint(c.APIEndpoint); err != nil {
			t.Fatalf("accepted endpoint %q is unusable: %v", endpoint, err)
		}
	})
}
