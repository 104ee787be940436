package units

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The unit texts anvil renders (services/revisions/domain/render/render.go).
const agentUnit = `[Unit]
Description=anvil agent: heartbeats, reports, carries out instructions
Wants=network-online.target
After=network-online.target

[Service]
EnvironmentFile=/etc/anvil/agent.env
ExecStart=/opt/anvil/bin/anvil-agent
Restart=always
RestartSec=5s

[Install]
WantedBy=multi-user.target
`

const joinUnit = `[Unit]
Description=Join the Kubernetes cluster with kubeadm
Wants=network-online.target
After=network-online.target systemd-sysext.service containerd.service
Requires=containerd.service
ConditionPathExists=!/etc/kubernetes/kubelet.conf

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/kubeadm join --config /etc/kubeadm/join.yaml

[Install]
WantedBy=multi-user.target
`

func write(t *testing.T, root, p, content string, mode os.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, p, target string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		t.Fatal(err)
	}
}

func TestParseINI(t *testing.T) {
	as, err := ParseINI([]byte("# c\n[Unit]\nDescription = a b \n; c\n[Service]\nExecStart=/bin/x \\\n  --flag \\\n  # gone\n  y\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Assignment{
		{Section: "Unit", Key: "Description", Value: "a b", Line: 3},
		{Section: "Service", Key: "ExecStart", Value: "/bin/x  --flag  y", Line: 6},
	}
	if !reflect.DeepEqual(as, want) {
		t.Fatalf("got %+v\nwant %+v", as, want)
	}
	for _, bad := range []string{"[Unit\n", "[Unit]\nnot an assignment\n", "Key=outside\n"} {
		if _, err := ParseINI([]byte(bad)); err == nil {
			t.Errorf("ParseINI(%q): no error", bad)
		}
	}
}

func TestParseCommand(t *testing.T) {
	env := map[string]string{"ARGS": "--a  --b", "NAME": "x y", "EMPTY": ""}
	for _, tc := range []struct {
		line string
		want Command
	}{
		{"/opt/anvil/bin/anvil-agent", Command{Path: "/opt/anvil/bin/anvil-agent", Argv: []string{"/opt/anvil/bin/anvil-agent"}}},
		{"-/bin/true $ARGS", Command{Path: "/bin/true", Argv: []string{"/bin/true", "--a", "--b"}, IgnoreFailure: true}},
		{`/bin/echo "${NAME}" pre${NAME}post $EMPTY '$ARGS'`, Command{Path: "/bin/echo", Argv: []string{"/bin/echo", "x y", "prex ypost", "--a", "--b"}}},
		{"@/bin/busybox sh -c 'echo hi'", Command{Path: "/bin/busybox", Argv: []string{"sh", "-c", "echo hi"}}},
		{"+!:/bin/x $ARGS", Command{Path: "/bin/x", Argv: []string{"/bin/x", "$ARGS"}}},
		{"!!/bin/x", Command{Path: "/bin/x", Argv: []string{"/bin/x"}}},
	} {
		got, err := ParseCommand(tc.line, env)
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, got, tc.want)
		}
	}
	for _, bad := range []string{"", "-", `/bin/x "open`, "@/bin/x"} {
		if _, err := ParseCommand(bad, env); err == nil {
			t.Errorf("ParseCommand(%q): no error", bad)
		}
	}
}

func TestParseTimespan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5": 5 * time.Second, "5s": 5 * time.Second, "100ms": 100 * time.Millisecond,
		"1min 30s": 90 * time.Second, "2h": 2 * time.Hour, "0.5": 500 * time.Millisecond, "10sec": 10 * time.Second,
	} {
		got, err := ParseTimespan(in)
		if err != nil || got != want {
			t.Errorf("ParseTimespan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "s", "5 parsecs"} {
		if _, err := ParseTimespan(bad); err == nil {
			t.Errorf("ParseTimespan(%q): no error", bad)
		}
	}
}

func TestParseEnvironmentFile(t *testing.T) {
	kvs, err := ParseEnvironmentFile([]byte("# c\nANVIL_BOOT_URL=http://10.0.2.2:1\nexport A=\"quoted value\"\nB='x'\n\nC=a\\\nb\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"ANVIL_BOOT_URL", "http://10.0.2.2:1"}, {"A", "quoted value"}, {"B", "x"}, {"C", "ab"}}
	if !reflect.DeepEqual(kvs, want) {
		t.Fatalf("got %v, want %v", kvs, want)
	}
	_, err = ParseEnvironmentFile([]byte("SECRET_LINE_WITHOUT_EQUALS\n"))
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("error must name the line, not its content: %v", err)
	}
}

func TestLoadAppliesDropInsAndMasks(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/usr/lib/systemd/system/x.service", "[Service]\nExecStart=/bin/a\nEnvironment=A=1\n", 0o644)
	write(t, root, "/usr/lib/systemd/system/x.service.d/10-a.conf", "[Service]\nEnvironment=B=lower\n", 0o644)
	write(t, root, "/etc/systemd/system/x.service.d/10-a.conf", "[Service]\nEnvironment=B=2\n", 0o644)
	write(t, root, "/etc/systemd/system/x.service.d/20-b.conf", "[Service]\nExecStart=\nExecStart=/bin/b\nRestart=always\n", 0o644)
	u, err := Load(root, "x.service")
	if err != nil {
		t.Fatal(err)
	}
	if u.Path != "/usr/lib/systemd/system/x.service" || len(u.DropIns) != 2 || u.DropIns[0] != "/etc/systemd/system/x.service.d/10-a.conf" {
		t.Fatalf("files: %s %v", u.Path, u.DropIns)
	}
	if !reflect.DeepEqual(u.ExecStart, []string{"/bin/b"}) || !reflect.DeepEqual(u.Environment, []string{"A=1", "B=2"}) || u.Restart != "always" {
		t.Fatalf("merged unit: %+v", u)
	}

	symlink(t, root, "/etc/systemd/system/y.service", "/dev/null")
	write(t, root, "/usr/lib/systemd/system/y.service", "[Service]\nExecStart=/bin/y\n", 0o644)
	if u, err := Load(root, "y.service"); err != nil || !u.Masked {
		t.Fatalf("masked unit: %+v, %v", u, err)
	}
	if _, err := Load(root, "none.service"); err == nil || !strings.Contains(err.Error(), "no unit file") {
		t.Fatalf("missing unit: %v", err)
	}
}

func TestEnvReadsFilesInOrder(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/etc/a.env", "A=from-file\nB=file\n", 0o600)
	u := &Unit{EnvironmentFiles: []string{"/etc/a.env", "-/etc/missing.env"}, Environment: []string{"B=unit"}}
	env, err := u.Env(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=" + DefaultPath, "A=from-file", "B=unit"}; !reflect.DeepEqual(env, want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	u.EnvironmentFiles = []string{"/etc/missing.env"}
	if _, err := u.Env(root); err == nil {
		t.Fatal("a missing required EnvironmentFile is not an error")
	}
}

// renderedTree lays out what Ignition writes for anvil's rendered config,
// the way Ignition v2.27 writes it: unit files and drop-ins under
// /etc/systemd/system, enablement in a preset file, masks as /dev/null links.
func renderedTree(t *testing.T) string {
	root := t.TempDir()
	write(t, root, "/etc/systemd/system/containerd.service.d/10-anvil.conf", "[Service]\nEnvironment=CONTAINERD_CONFIG=/etc/containerd/config.toml\n", 0o644)
	write(t, root, "/etc/systemd/system/anvil-kubeadm-join.service", joinUnit, 0o644)
	write(t, root, "/etc/systemd/system/anvil-agent.service", agentUnit, 0o644)
	symlink(t, root, "/etc/systemd/system/update-engine.service", "/dev/null")
	symlink(t, root, "/etc/systemd/system/locksmithd.service", "/dev/null")
	write(t, root, "/etc/systemd/system-preset/20-ignition.preset",
		"enable anvil-agent.service\nenable anvil-kubeadm-join.service\nenable containerd.service\n", 0o644)
	write(t, root, "/etc/anvil/agent.env", "ANVIL_BOOT_URL=http://10.0.2.2:1\nANVIL_AGENT_CREDENTIAL=abcdefghijklmnopqrstuvwxyz\n", 0o600)
	write(t, root, "/opt/anvil/bin/anvil-agent", "#!/bin/sh\n", 0o755)
	return root
}

func TestPlanForARenderedConfig(t *testing.T) {
	root := renderedTree(t)
	ds, err := Plan(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Decision{}
	var order []string
	for _, d := range ds {
		got[d.Name] = d
		order = append(order, d.Name)
	}
	if want := []string{"anvil-agent.service", "containerd.service", "anvil-kubeadm-join.service"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	agent := got["anvil-agent.service"]
	if !agent.Start || len(agent.ExecStart) != 1 || agent.ExecStart[0].Path != "/opt/anvil/bin/anvil-agent" || agent.Unit.Restart != "always" || agent.Unit.RestartDelay != 5*time.Second {
		t.Fatalf("agent: %+v", agent)
	}
	if want := []string{"PATH=" + DefaultPath, "ANVIL_BOOT_URL=http://10.0.2.2:1", "ANVIL_AGENT_CREDENTIAL=abcdefghijklmnopqrstuvwxyz"}; !reflect.DeepEqual(agent.Env, want) {
		t.Fatalf("agent env %v", agent.Env)
	}
	if d := got["anvil-kubeadm-join.service"]; d.Start || d.Reason != "/usr/bin/kubeadm is not part of this test OS" {
		t.Fatalf("join: %+v", d)
	}
	if d := got["containerd.service"]; d.Start || !strings.Contains(d.Reason, "no unit file") {
		t.Fatalf("containerd: %+v", d)
	}
	for _, masked := range []string{"update-engine.service", "locksmithd.service"} {
		if _, ok := got[masked]; ok {
			t.Errorf("%s is masked and not enabled, but is in the plan", masked)
		}
	}
}

func TestPlanSkipsWhatRequiresASkippedUnit(t *testing.T) {
	root := renderedTree(t)
	// With kubeadm present, the join unit is skipped for containerd.
	write(t, root, "/usr/bin/kubeadm", "#!/bin/sh\n", 0o755)
	ds, err := Plan(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Name == "anvil-kubeadm-join.service" {
			if d.Start || !strings.HasPrefix(d.Reason, "it requires containerd.service, which is not started") {
				t.Fatalf("join: %+v", d)
			}
			return
		}
	}
	t.Fatal("join unit not in the plan")
}

func TestPlanOrderAndPulledInUnits(t *testing.T) {
	root := t.TempDir()
	write(t, root, "/bin/true", "", 0o755)
	write(t, root, "/etc/systemd/system/a.service", "[Unit]\nAfter=b.service c.service\nWants=c.service\n[Service]\nExecStart=/bin/true\n", 0o644)
	write(t, root, "/etc/systemd/system/b.service", "[Unit]\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n", 0o644)
	write(t, root, "/etc/systemd/system/c.service", "[Unit]\nBefore=b.service\n[Service]\nExecStart=/bin/true\n", 0o644)
	write(t, root, "/etc/systemd/system/d.service", "[Service]\nExecStart=/bin/true\n", 0o644)
	symlink(t, root, "/etc/systemd/system/multi-user.target.wants/a.service", "../a.service")
	write(t, root, "/etc/systemd/system-preset/20-x.preset", "disable b.service\nenable b.service\nenable d.service\ndisable *\n", 0o644)
	ds, err := Plan(root)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, d := range ds {
		order = append(order, d.Name+map[bool]string{true: "+", false: "-"}[d.Start])
	}
	// b is disabled (the first matching preset line wins), so a's After=b
	// orders nothing; c is pulled in by a and ordered before it; d is
	// enabled but has no [Install] section.
	if want := []string{"c.service+", "a.service+", "d.service-"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

func TestConditionPathExists(t *testing.T) {
	root := t.TempDir()
	u := &Unit{ConditionPathExists: []string{"!/etc/kubernetes/kubelet.conf"}}
	if why := u.CheckConditions(root); why != "" {
		t.Fatalf("condition failed on an empty root: %s", why)
	}
	write(t, root, "/etc/kubernetes/kubelet.conf", "x", 0o600)
	if why := u.CheckConditions(root); why == "" {
		t.Fatal("condition met although kubelet.conf exists")
	}
}
