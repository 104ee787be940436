package render

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreos/ignition/v2/config/v3_4"
	"github.com/coreos/ignition/v2/config/v3_4/types"
	"github.com/vincent-petithory/dataurl"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	"github.com/anvil-fleet/anvil/services/revisions/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testCredential = "cred_0123456789-abcdefghijKLMNOP"

// parseIgnition parses with Ignition's own v3_4 package and fails on any
// report entry.
func parseIgnition(t testing.TB, b []byte) types.Config {
	t.Helper()
	cfg, report, err := v3_4.Parse(b)
	if err != nil {
		t.Fatalf("v3_4.Parse: %v\n%s", err, report)
	}
	if len(report.Entries) > 0 {
		t.Fatalf("v3_4.Parse report:\n%s", report)
	}
	return cfg
}

func fileContents(t testing.TB, cfg types.Config, path string) (string, bool) {
	t.Helper()
	for _, f := range cfg.Storage.Files {
		if f.Path == path {
			if f.Contents.Source == nil {
				return "", true
			}
			src := *f.Contents.Source
			if !strings.HasPrefix(src, "data:") {
				return src, true
			}
			u, err := dataurl.DecodeString(src)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return string(u.Data), true
		}
	}
	return "", false
}

func TestGolden(t *testing.T) {
	for name, cfg := range shapes() {
		t.Run(name, func(t *testing.T) {
			in := testInput(t, cfg, "node-1.rack12.example", map[string]string{"anvil.dev/slot": "7"})
			got, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".ign.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("render differs from %s (run with -update if intended)", golden)
			}
			// The golden file itself is valid Ignition, as rendered and
			// after the boot service swaps in a credential.
			parsed := parseIgnition(t, want)
			withCred, err := api.InjectCredential(want, testCredential)
			if err != nil {
				t.Fatal(err)
			}
			parsedCred := parseIgnition(t, withCred)
			env, _ := fileContents(t, parsedCred, AgentEnvPath)
			if !strings.Contains(env, "ANVIL_AGENT_CREDENTIAL="+testCredential+"\n") {
				t.Fatalf("agent.env after substitution = %q", env)
			}
			env, _ = fileContents(t, parsed, AgentEnvPath)
			if !strings.Contains(env, "ANVIL_AGENT_CREDENTIAL="+AgentCredentialPlaceholder+"\n") {
				t.Fatalf("agent.env = %q", env)
			}
			// Rendering is deterministic.
			again, _ := Render(in)
			if !bytes.Equal(got, again) {
				t.Fatal("render is not deterministic")
			}
		})
	}
}

func TestRenderContents(t *testing.T) {
	in := testInput(t, shapes()["bond-vlan-bridge"], "node-1.rack12.example", map[string]string{"anvil.dev/slot": "7", "anvil.dev/rack": "r99"})
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseIgnition(t, out)
	want := map[string]string{
		"/etc/hostname": "node-1.rack12.example\n",
		RevisionPath:    in.Machine.ID + "\n",
		"/etc/systemd/network/10-anvil-bond0.netdev":      "[NetDev]\nName=bond0\nKind=bond\n\n[Bond]\nMode=802.3ad\nMIIMonitorSec=100ms\n",
		"/etc/systemd/network/10-anvil-bond0.100.netdev":  "[NetDev]\nName=bond0.100\nKind=vlan\n\n[VLAN]\nId=100\n",
		"/etc/systemd/network/20-anvil-enp65s0f0.network": "[Match]\nName=enp65s0f0\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nBond=bond0\n",
		"/etc/systemd/network/20-anvil-bond0.network":     "[Match]\nName=bond0\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nLinkLocalAddressing=no\nVLAN=bond0.100\nVLAN=bond0.200\n",
		"/etc/systemd/network/20-anvil-bond0.200.network": "[Match]\nName=bond0.200\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nBridge=br200\n",
		"/etc/systemd/network/20-anvil-br200.network":     "[Match]\nName=br200\n\n[Network]\nAddress=192.168.200.10/24\n",
		"/etc/systemd/network/20-anvil-bond0.100.network": "[Match]\nName=bond0.100\n\n[Link]\nMTUBytes=9000\n\n[Network]\nDHCP=ipv4\n",
	}
	for path, content := range want {
		got, ok := fileContents(t, cfg, path)
		if !ok || got != content {
			t.Errorf("%s = %q, want %q", path, got, content)
		}
	}
	join, _ := fileContents(t, cfg, JoinConfigPath)
	for _, s := range []string{
		"apiVersion: kubeadm.k8s.io/v1beta4", "apiServerEndpoint: api.prod.example:6443", "token: abcdef.0123456789abcdef",
		"- " + testCAHash, "name: node-1.rack12.example",
		"value: anvil.dev/rack=r99,anvil.dev/slot=7,node.kubernetes.io/pool=storage", // machine labels win
		"name: max-pods", "key: dedicated", "effect: NoSchedule",
	} {
		if !strings.Contains(join, s) {
			t.Errorf("join.yaml lacks %q:\n%s", s, join)
		}
	}
	agent, _ := fileContents(t, cfg, AgentBinaryPath)
	if agent != testOptions.AgentURL {
		t.Errorf("agent source = %q", agent)
	}
	units := map[string]types.Unit{}
	for _, u := range cfg.Systemd.Units {
		units[u.Name] = u
	}
	if u := units[AgentUnit]; u.Enabled == nil || !*u.Enabled || !strings.Contains(*u.Contents, "ExecStart="+AgentBinaryPath) {
		t.Errorf("agent unit = %+v", u)
	}
	if u := units[JoinUnit]; u.Enabled == nil || !*u.Enabled || !strings.Contains(*u.Contents, "kubeadm join --config "+JoinConfigPath) {
		t.Errorf("join unit = %+v", u)
	}
	if len(cfg.Passwd.Users) != 1 || cfg.Passwd.Users[0].Name != "core" || string(cfg.Passwd.Users[0].SSHAuthorizedKeys[0]) != testKeyEd25519 {
		t.Errorf("users = %+v", cfg.Passwd.Users)
	}
	if n := bytes.Count(out, []byte(AgentCredentialPlaceholder)); n != 1 {
		t.Errorf("placeholder occurs %d times", n)
	}
	if _, ok := units["var-lib-containerd.mount"]; ok {
		t.Error("mount unit without a cache disk")
	}
}

// TestRenderVerifiesRemoteFiles: every file Ignition fetches from a URL
// carries the hash Ignition checks it against (parsed back with Ignition's
// own v3_4 package): the agent binary and the Kubernetes sysext.
func TestRenderVerifiesRemoteFiles(t *testing.T) {
	out, err := Render(testInput(t, shapes()["dhcp"], "node-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseIgnition(t, out)
	want := map[string][2]string{
		AgentBinaryPath: {testOptions.AgentURL, testOptions.AgentHash},
		"/opt/extensions/kubernetes/kubernetes-v1.33.4-x86-64.raw": {testOptions.SysextURL, testOptions.SysextHash},
	}
	remote := 0
	for _, f := range cfg.Storage.Files {
		src := f.Contents.Source
		if src == nil || strings.HasPrefix(*src, "data:") {
			continue
		}
		remote++
		w, ok := want[f.Path]
		if !ok {
			t.Errorf("unexpected remote file %s from %s", f.Path, *src)
			continue
		}
		if *src != w[0] {
			t.Errorf("%s: source %s, want %s", f.Path, *src, w[0])
		}
		if f.Contents.Verification.Hash == nil || *f.Contents.Verification.Hash != w[1] {
			t.Errorf("%s: verification hash %v, want %s", f.Path, f.Contents.Verification.Hash, w[1])
		}
	}
	if remote != len(want) {
		t.Errorf("%d remote files, want %d", remote, len(want))
	}
}

func TestRenderCacheDisk(t *testing.T) {
	in := testInput(t, shapes()["cache-disk"], "node-1", nil)
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseIgnition(t, out)
	if len(cfg.Storage.Filesystems) != 1 {
		t.Fatalf("filesystems = %+v", cfg.Storage.Filesystems)
	}
	fs := cfg.Storage.Filesystems[0]
	if *fs.Path != CacheMountPath || *fs.Format != "xfs" || !*fs.WipeFilesystem || fs.Device != shapes()["cache-disk"].CacheDisk.Device {
		t.Fatalf("filesystem = %+v", fs)
	}
	var mount, containerd *types.Unit
	for i, u := range cfg.Systemd.Units {
		switch u.Name {
		case "var-lib-containerd.mount":
			mount = &cfg.Systemd.Units[i]
		case "containerd.service":
			containerd = &cfg.Systemd.Units[i]
		}
	}
	if mount == nil || !strings.Contains(*mount.Contents, "Where=/var/lib/containerd") {
		t.Fatalf("mount unit = %+v", mount)
	}
	if containerd == nil || !strings.Contains(*containerd.Dropins[0].Contents, "Requires=var-lib-containerd.mount") {
		t.Fatalf("containerd = %+v", containerd)
	}
}

func TestJoinConfigurationVersions(t *testing.T) {
	cfg := baseConfig()
	cfg.Kubernetes = pool.Kubernetes{Minor: "1.30", Version: "1.30.14"}
	cfg.KubeletExtraArgs = map[string]string{"max-pods": "300"}
	out, err := Render(testInput(t, cfg, "node-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	join, _ := fileContents(t, parseIgnition(t, out), JoinConfigPath)
	if !strings.Contains(join, "kubeadm.k8s.io/v1beta3") || !strings.Contains(join, `max-pods: "300"`) {
		t.Fatalf("1.30 join config:\n%s", join)
	}
	if !strings.Contains(string(out), "kubernetes-v1.30.14-x86-64.raw") {
		t.Fatal("sysext version")
	}
}

// TestRenderEscapes puts awkward but valid values everywhere a user can:
// they must come out as data, not as structure.
func TestRenderEscapes(t *testing.T) {
	cfg := baseConfig()
	cfg.KubeletExtraArgs = map[string]string{
		"eviction-hard":   "memory.available<500Mi,nodefs.available<10%",
		"system-reserved": "cpu=500m,memory=1Gi",
		"feature-gates":   "A=true,B=false",
		"x":               "#:{}[]&*!|>@%",
	}
	cfg.NodeLabels = map[string]string{"a.b/c": "true", "yes": "no", "null": "1.0"}
	cfg.Taints = []pool.Taint{{Key: "null", Value: "true", Effect: pool.EffectNoExecute}}
	out, err := Render(testInput(t, cfg, "n", map[string]string{"on": "off"}))
	if err != nil {
		t.Fatal(err)
	}
	join, _ := fileContents(t, parseIgnition(t, out), JoinConfigPath)
	var doc struct {
		NodeRegistration struct {
			KubeletExtraArgs []struct{ Name, Value string } `json:"kubeletExtraArgs"`
			Taints           []struct{ Key, Value, Effect string }
		} `json:"nodeRegistration"`
	}
	if err := yamlToJSON(join, &doc); err != nil {
		t.Fatalf("%v\n%s", err, join)
	}
	got := map[string]string{}
	for _, a := range doc.NodeRegistration.KubeletExtraArgs {
		got[a.Name] = a.Value
	}
	for k, v := range cfg.KubeletExtraArgs {
		if got[k] != v {
			t.Errorf("arg %s = %q, want %q", k, got[k], v)
		}
	}
	if got["node-labels"] != "a.b/c=true,null=1.0,on=off,yes=no" {
		t.Errorf("node-labels = %q", got["node-labels"])
	}
	if tt := doc.NodeRegistration.Taints; len(tt) != 1 || tt[0].Key != "null" || tt[0].Value != "true" {
		t.Errorf("taints = %+v", tt)
	}
}

func TestRenderRefusesBadInput(t *testing.T) {
	good := testInput(t, shapes()["dhcp"], "node-1", nil)
	tests := []struct {
		name   string
		mutate func(*Input)
		field  string
	}{
		{"machine tampered", func(in *Input) { in.Machine.Hostname = "node-2" }, "machine"},
		{"wrong pool revision", func(in *Input) {
			c := in.Revision.Config
			c.SSHKeys = nil
			in.Revision.Config, in.Revision.Hash = c, c.Hash()
		}, "revision"},
		{"revision hash mismatch", func(in *Input) { in.Revision.Config.SSHKeys = nil }, "revision"},
		{"bad token", func(in *Input) { in.Join.BootstrapToken = "nope" }, "join.bootstrap_token"},
		{"bad endpoint", func(in *Input) { in.Join.APIEndpoint = "api:6443" }, "join.api_endpoint"},
		{"bad ca hash", func(in *Input) { in.Join.CACertHash = "md5:x" }, "join.ca_cert_hash"},
		{"no base url", func(in *Input) { in.Options.BaseURL = "" }, "options.base_url"},
		{"agent url with quote", func(in *Input) { in.Options.AgentURL = `https://x/"a` }, "options.agent_url"},
		{"agent url ftp", func(in *Input) { in.Options.AgentURL = "ftp://x/a" }, "options.agent_url"},
		{"bad agent hash", func(in *Input) { in.Options.AgentHash = "md5-00" }, "options.agent_hash"},
		{"no agent hash", func(in *Input) { in.Options.AgentHash = "" }, "options.agent_hash"},
		{"no sysext url", func(in *Input) { in.Options.SysextURL = "" }, "options.sysext_url"},
		{"no sysext hash", func(in *Input) { in.Options.SysextHash = "" }, "options.sysext_hash"},
		{"bad sysext hash", func(in *Input) { in.Options.SysextHash = "sha512-XYZ" }, "options.sysext_hash"},
		{"bad arch", func(in *Input) { in.Options.Arch = "riscv" }, "options.arch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := good
			in.Revision.Config = good.Revision.Config.Normalize() // deep copy
			tt.mutate(&in)
			_, err := Render(in)
			if !errs.Is(err, errs.KindValidation) {
				t.Fatalf("err = %v", err)
			}
			found := false
			for _, f := range errs.As(err).Fields {
				found = found || f.Field == tt.field
			}
			if !found {
				t.Fatalf("no error on %s: %v", tt.field, err)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Fatalf("error leaks the token: %v", err)
			}
		})
	}
}

func TestInjectCredential(t *testing.T) {
	out, err := Render(testInput(t, shapes()["dhcp"], "node-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"short", `has"quote-0123456789abc`, "has%25percent0123456789", strings.Repeat("a", 129)} {
		if _, err := api.InjectCredential(out, bad); err == nil {
			t.Errorf("accepted credential %q", bad)
		}
	}
	for _, good := range []string{strings.Repeat("a", 20), strings.Repeat("Z9_-", 32)} {
		b, err := api.InjectCredential(out, good)
		if err != nil {
			t.Fatal(err)
		}
		parseIgnition(t, b)
		if !json.Valid(b) || bytes.Contains(b, []byte(AgentCredentialPlaceholder)) {
			t.Fatal("bad substitution")
		}
		if _, err := api.InjectCredential(b, good); err == nil {
			t.Fatal("injected twice")
		}
	}
}

func TestPreview(t *testing.T) {
	in := testInput(t, shapes()["dhcp"], "node-1", nil)
	p, err := Preview("workers", in.Revision, testJoin, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("data:,"+PreviewHostname+"%0A")) {
		t.Fatal("preview hostname missing")
	}
}

func TestButaneIsYAML(t *testing.T) {
	b, err := Butane(testInput(t, shapes()["static"], "node-1", nil))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("variant: flatcar\nversion: 1.1.0\n")) {
		t.Fatalf("butane starts with %q", b[:40])
	}
}
