package vmtest

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// What anvil's renderer writes for Kubernetes
// (services/revisions/domain/render/render.go), copied so that the
// self-test needs no anvil service module. The kubernetes variant must run
// these as they are.
const (
	ModulesLoad = "overlay\nbr_netfilter\n"
	Sysctls     = "net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n"
	// ContainerdConfig is render.go's ContainerdConfig.
	ContainerdConfig = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
`
	ContainerdDropin = "[Service]\nEnvironment=CONTAINERD_CONFIG=/etc/containerd/config.toml\n"
	// VolumePluginDir is render.go's defaultKubeletArgs.
	VolumePluginDir = "/opt/libexec/kubernetes/kubelet-plugins/volume/exec/"
)

// ProbeUnit is the self-test's own addition to the config (anvil renders
// nothing like it): once the boot has finished (is-system-running --wait,
// so Type=simple, or the boot would wait for it), it prints what systemd
// did as "anvil-selftest: <what>: <line>" on the console, through journald.
const ProbeUnit = `[Unit]
Description=anvil self-test probe: reports what systemd did, on the console
After=anvil-agent.service

[Service]
Type=simple
ExecStart=/opt/anvil-selftest/probe
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`

const ProbeScript = `#!/bin/bash
# The self-test's probe; see ProbeUnit.
p() { sed -u "s|^|anvil-selftest: $1: |"; }
systemctl is-system-running --wait 2>&1 | p system-state
systemctl list-units --failed --plain --no-legend --no-pager 2>&1 | p failed
systemd-analyze time 2>&1 | p analyze
for u in multi-user.target systemd-sysext.service ensure-sysext.service containerd.service \
	anvil-testos-import-images.service anvil-kubeadm-join.service kubelet.service anvil-agent.service \
	systemd-networkd.service systemd-resolved.service anvil-testos-initrd-log.service; do
	echo "$u $(systemctl show -p LoadState -p ActiveState -p SubState -p Result -p ExecMainStatus -p ActiveEnterTimestampMonotonic "$u" | LC_ALL=C sort | paste -sd' ')" | p unit
done
for u in containerd.service anvil-kubeadm-join.service anvil-agent.service update-engine.service locksmithd.service kubelet.service apt-daily.timer; do
	echo "$u $(systemctl is-enabled "$u" 2>&1)" | p is-enabled
done
/usr/bin/kubelet --version 2>&1 | p kubelet-version
/usr/bin/kubeadm version -o short 2>&1 | p kubeadm-version
systemd-sysext status --no-pager 2>&1 | p sysext
findmnt -n -o FSTYPE,OPTIONS /usr 2>&1 | p usr-mount
touch /usr/.anvil-selftest 2>&1 | p usr-write
pid=$(systemctl show -p MainPID --value containerd.service)
echo "$(tr '\0' ' ' </proc/$pid/cmdline)" | p containerd-cmdline
ctr --namespace k8s.io images list --quiet 2>&1 | p image
ls /opt/cni/bin 2>&1 | paste -sd' ' | p cni-bin
ls /etc/cni/net.d 2>&1 | p cni-conf
echo "ip_forward=$(cat /proc/sys/net/ipv4/ip_forward) bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>&1)" | p sysctl
lsmod | awk 'NR > 1 { print $1 }' | grep -E '^(br_netfilter|overlay|bridge|nf_conntrack)$' | p module
journalctl -b --no-pager -o cat -u anvil-kubeadm-join.service 2>&1 | p join-log
journalctl -b --no-pager -o cat -u anvil-testos-import-images.service 2>&1 | p import-log
journalctl -b --no-pager -o cat 2>&1 | grep -E 'preset unit settings|Detected first boot|machine ID' | p pid1
journalctl -b --no-pager -o cat -t initrd 2>&1 | grep -c 'ignition files: ok' | p initrd-log
networkctl list --no-pager --no-legend 2>&1 | p networkctl
id core 2>&1 | p core
hostname | p hostname
grep -E '^(MemTotal|MemAvailable):' /proc/meminfo | p meminfo
echo | p done
`

// followUnit copies the journal of units to the console (not to the
// journal again: StandardOutput=tty).
func followUnit(units []string) string {
	args := ""
	for _, u := range units {
		args += " -u " + u
	}
	return `[Unit]
Description=anvil self-test: the journal of` + args + ` on the console
After=systemd-journald.service

[Service]
ExecStart=/bin/bash -c 'journalctl -b -f --no-pager -o short-monotonic` + args + ` | sed -u "s|^|follow: |"'
StandardOutput=tty
TTYReset=no
TTYVHangup=no

[Install]
WantedBy=multi-user.target
`
}

// KubeJoin is the kubeadm join material of the config.
type KubeJoin struct {
	APIServerEndpoint string // host:port as the VM reaches it
	Token             string
	CACertHash        string
	// DiscoveryTimeout, when set, is written as timeouts.discovery (anvil
	// renders none, so kubeadm's default of 5 minutes applies).
	DiscoveryTimeout string
}

// KubernetesConfig is an Ignition 3.4.0 config with everything anvil's
// renderer writes for a machine of a pool on Kubernetes (written by hand
// in the same shape), plus the self-test's probe.
type KubernetesConfig struct {
	Hostname   string
	Revision   string
	BootURL    string // as the VM sees it: http://10.0.2.2:<port>
	Credential string
	AgentURL   string
	AgentHash  string // sha512-<hex>
	SysextName string // kubernetes-v1.37.1-x86-64.raw
	SysextURL  string
	SysextHash string // sha512-<hex>
	Join       KubeJoin
	Labels     map[string]string // node labels (kubelet --node-labels)
	Taints     []Taint
	SSHKey     string
	// Follow, when set, adds the self-test's anvil-selftest-follow.service,
	// which copies these units' journal to the console as it grows (lines
	// start with "follow: "), so that a failing test shows what the
	// kubelet or containerd said.
	Follow []string
}

// Taint is a node taint as kubeadm's nodeRegistration.taints takes it.
type Taint struct{ Key, Value, Effect string }

// JoinYAML is render.go's joinConfiguration (v1beta4) for this config.
func (c KubernetesConfig) JoinYAML() string {
	q := strconv.Quote
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n")
	b.WriteString("discovery:\n  bootstrapToken:\n")
	b.WriteString("    apiServerEndpoint: " + q(c.Join.APIServerEndpoint) + "\n")
	b.WriteString("    caCertHashes:\n      - " + q(c.Join.CACertHash) + "\n")
	b.WriteString("    token: " + q(c.Join.Token) + "\n")
	b.WriteString("nodeRegistration:\n  criSocket: unix:///run/containerd/containerd.sock\n")
	b.WriteString("  kubeletExtraArgs:\n")
	if len(c.Labels) > 0 {
		var pairs []string
		for k, v := range c.Labels {
			pairs = append(pairs, k+"="+v)
		}
		slices.Sort(pairs)
		b.WriteString("    - name: node-labels\n      value: " + q(strings.Join(pairs, ",")) + "\n")
	}
	b.WriteString("    - name: volume-plugin-dir\n      value: " + q(VolumePluginDir) + "\n")
	b.WriteString("  name: " + q(c.Hostname) + "\n")
	if len(c.Taints) == 0 {
		b.WriteString("  taints: []\n")
	} else {
		b.WriteString("  taints:\n")
		for _, t := range c.Taints {
			b.WriteString("    - key: " + q(t.Key) + "\n")
			if t.Value != "" {
				b.WriteString("      value: " + q(t.Value) + "\n")
			}
			b.WriteString("      effect: " + q(t.Effect) + "\n")
		}
	}
	if c.Join.DiscoveryTimeout != "" {
		b.WriteString("timeouts:\n  discovery: " + c.Join.DiscoveryTimeout + "\n")
	}
	return b.String()
}

func (c KubernetesConfig) JSON() ([]byte, error) {
	type contents struct {
		Source       string            `json:"source"`
		Verification map[string]string `json:"verification,omitempty"`
	}
	type file struct {
		Path      string   `json:"path"`
		Mode      int      `json:"mode"`
		Overwrite bool     `json:"overwrite"`
		Contents  contents `json:"contents"`
	}
	inline := func(path string, mode int, s string) file {
		return file{Path: path, Mode: mode, Overwrite: true, Contents: contents{Source: DataURL(s)}}
	}
	remote := func(path string, mode int, url, hash string) file {
		return file{Path: path, Mode: mode, Overwrite: true, Contents: contents{Source: url, Verification: map[string]string{"hash": hash}}}
	}
	env := "ANVIL_BOOT_URL=" + c.BootURL + "\n" +
		"ANVIL_MACHINE_REVISION=" + c.Revision + "\n" +
		"ANVIL_AGENT_CREDENTIAL=" + c.Credential + "\n"
	files := []file{
		inline("/etc/hostname", 0o644, c.Hostname+"\n"),
		inline("/etc/anvil/revision", 0o644, c.Revision+"\n"),
		inline("/etc/modules-load.d/anvil-kubernetes.conf", 0o644, ModulesLoad),
		inline("/etc/sysctl.d/anvil-kubernetes.conf", 0o644, Sysctls),
		inline("/etc/containerd/config.toml", 0o644, ContainerdConfig),
		inline("/etc/kubeadm/join.yaml", 0o600, c.JoinYAML()),
		remote("/opt/extensions/kubernetes/"+c.SysextName, 0o644, c.SysextURL, c.SysextHash),
		remote("/opt/anvil/bin/anvil-agent", 0o755, c.AgentURL, c.AgentHash),
		inline("/etc/anvil/agent.env", 0o600, env),
		inline("/opt/anvil-selftest/probe", 0o755, ProbeScript),
	}
	var passwd map[string]any
	if c.SSHKey != "" {
		passwd = map[string]any{"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []string{c.SSHKey}}}}
	}
	cfg := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"storage": map[string]any{
			"files": files,
			"links": []any{map[string]any{
				"path": "/etc/extensions/kubernetes.raw", "target": "/opt/extensions/kubernetes/" + c.SysextName,
				"hard": false, "overwrite": true,
			}},
		},
		"systemd": map[string]any{
			"units": []any{
				map[string]any{"name": "containerd.service", "enabled": true, "dropins": []any{
					map[string]any{"name": "10-anvil.conf", "contents": ContainerdDropin},
				}},
				map[string]any{"name": "anvil-kubeadm-join.service", "enabled": true, "contents": JoinUnit},
				map[string]any{"name": "anvil-agent.service", "enabled": true, "contents": AgentUnit},
				map[string]any{"name": "update-engine.service", "mask": true},
				map[string]any{"name": "locksmithd.service", "mask": true},
				map[string]any{"name": "anvil-selftest-probe.service", "enabled": true, "contents": ProbeUnit},
			},
		},
	}
	if passwd != nil {
		cfg["passwd"] = passwd
	}
	if len(c.Follow) > 0 {
		units := cfg["systemd"].(map[string]any)["units"].([]any)
		cfg["systemd"].(map[string]any)["units"] = append(units, map[string]any{
			"name": "anvil-selftest-follow.service", "enabled": true, "contents": followUnit(c.Follow),
		})
	}
	return json.MarshalIndent(cfg, "", "  ")
}
