package diff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

func TestRevisions(t *testing.T) {
	mk := func(n int, c pool.Config) pool.Revision {
		c = c.Normalize()
		return pool.Revision{Number: n, Hash: c.Hash(), Config: c}
	}
	c1 := pool.Config{
		Kubernetes: pool.Kubernetes{Minor: "1.33", Version: "1.33.4"},
		Flatcar:    pool.Flatcar{Channel: "stable", Version: "4230.2.3"},
		Network:    pool.Network{Interfaces: []pool.Interface{{Name: "eno1", DHCP: pool.DHCPv4}}},
		NodeLabels: map[string]string{"anvil.dev/rack": "r1"},
	}
	c2 := c1
	c2.Kubernetes.Version = "1.33.5"
	c2.NodeLabels = map[string]string{"anvil.dev/rack": "r2"}
	c2.Network = pool.Network{Interfaces: []pool.Interface{{Name: "eno1", DHCP: pool.DHCPv4}, {Name: "eno2", DHCP: pool.DHCPv6}}}
	r1, r2 := mk(1, c1), mk(2, c2)

	join := cluster.Join{APIEndpoint: "https://api:6443", BootstrapToken: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("a", 64)}
	ign := func(r pool.Revision) []byte {
		// As the revisions service resolves them: the sysext of the
		// revision's version, each file with its hash.
		opts := render.Options{BaseURL: "https://boot:8443",
			AgentURL: "https://boot:8443/assets/anvil-agent-linux-amd64", AgentHash: "sha512-" + strings.Repeat("a", 128),
			SysextURL:  "https://boot:8443/sysext/kubernetes-v" + r.Config.Kubernetes.Version + "-x86-64.raw",
			SysextHash: "sha512-" + strings.Repeat(r.Config.Kubernetes.Version[len(r.Config.Kubernetes.Version)-1:], 128)}
		in, err := render.Preview("workers", r, join, opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := render.Render(in)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	d, err := Revisions(r1, r2, ign(r1), ign(r2))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range d.Changes {
		paths = append(paths, c.Path)
	}
	if fmt.Sprint(paths) != `[kubernetes.version network.interfaces[1] node_labels["anvil.dev/rack"]]` {
		t.Fatalf("changes = %v", paths)
	}
	if d.From != 1 || d.To != 2 || d.FromHash != r1.Hash || d.ToHash != r2.Hash {
		t.Fatalf("diff header = %+v", d)
	}
	for _, s := range []string{"--- revision-1.ign.json", "+++ revision-2.ign.json", "-          \"source\": \"https://boot:8443/sysext/kubernetes-v1.33.4-x86-64.raw\"", "+          \"source\": \"https://boot:8443/sysext/kubernetes-v1.33.5-x86-64.raw\""} {
		if !strings.Contains(d.Ignition, s) {
			t.Errorf("ignition diff lacks %q:\n%s", s, d.Ignition)
		}
	}
	files := map[string]string{}
	for _, f := range d.Files {
		files[f.Path] = f.Unified
	}
	if !strings.Contains(files["/etc/kubeadm/join.yaml"], "-      value: anvil.dev/rack=r1\n+      value: anvil.dev/rack=r2\n") {
		t.Errorf("join.yaml diff:\n%s", files["/etc/kubeadm/join.yaml"])
	}
	if !strings.Contains(files["/etc/systemd/network/20-anvil-eno2.network"], "+DHCP=ipv6") {
		t.Errorf("new network file diff:\n%s", files["/etc/systemd/network/20-anvil-eno2.network"])
	}
	if _, ok := files["/etc/hostname"]; ok {
		t.Error("unchanged file listed")
	}
	// Same revision: nothing.
	same, _ := Revisions(r1, r1, ign(r1), ign(r1))
	if len(same.Changes) != 0 || same.Ignition != "" || len(same.Files) != 0 {
		t.Fatalf("self diff = %+v", same)
	}
	if _, err := Revisions(r1, r2, []byte("{"), ign(r2)); err == nil {
		t.Fatal("accepted broken JSON")
	}
}
