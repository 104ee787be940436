package vmtest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// AgentUnit and JoinUnit are the unit texts anvil renders
// (services/revisions/domain/render/render.go), copied so that the
// self-tests need no anvil service module.
const AgentUnit = `[Unit]
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

// JoinUnit is render.go's joinUnit; see AgentUnit.
const JoinUnit = `[Unit]
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

// DataURL percent-escapes s the way a "data:," source needs it.
func DataURL(s string) string {
	var b strings.Builder
	b.WriteString("data:,")
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~/:", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// MachineConfig is what the default variant's self-test hands one boot: an
// Ignition 3.4.0 config with the shape anvil renders (files, a remote
// binary with verification.hash, a link, the core user, enabled and
// masked units), written by hand.
type MachineConfig struct {
	Hostname   string
	Revision   string
	BootURL    string // as the VM sees it: http://10.0.2.2:<port>
	Credential string
	AgentURL   string
	AgentHash  string // sha512-<hex>
	SSHKey     string
}

func (c MachineConfig) JSON() ([]byte, error) {
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
	env := "ANVIL_BOOT_URL=" + c.BootURL + "\n" +
		"ANVIL_MACHINE_REVISION=" + c.Revision + "\n" +
		"ANVIL_AGENT_CREDENTIAL=" + c.Credential + "\n"
	cfg := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"passwd": map[string]any{
			"users": []any{map[string]any{"name": "core", "sshAuthorizedKeys": []string{c.SSHKey}}},
		},
		"storage": map[string]any{
			"files": []file{
				inline("/etc/hostname", 0o644, c.Hostname+"\n"),
				inline("/etc/anvil/revision", 0o644, c.Revision+"\n"),
				inline("/etc/kubeadm/join.yaml", 0o600, "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n"),
				{Path: "/opt/anvil/bin/anvil-agent", Mode: 0o755, Overwrite: true, Contents: contents{
					Source: c.AgentURL, Verification: map[string]string{"hash": c.AgentHash},
				}},
				inline("/etc/anvil/agent.env", 0o600, env),
			},
			"links": []any{map[string]any{
				"path": "/etc/extensions/kubernetes.raw", "target": "/opt/extensions/kubernetes/kubernetes-v1.33.4-x86-64.raw",
				"hard": false, "overwrite": true,
			}},
		},
		"systemd": map[string]any{
			"units": []any{
				map[string]any{"name": "containerd.service", "enabled": true, "dropins": []any{
					map[string]any{"name": "10-anvil.conf", "contents": "[Service]\nEnvironment=CONTAINERD_CONFIG=/etc/containerd/config.toml\n"},
				}},
				map[string]any{"name": "anvil-kubeadm-join.service", "enabled": true, "contents": JoinUnit},
				map[string]any{"name": "anvil-agent.service", "enabled": true, "contents": AgentUnit},
				map[string]any{"name": "update-engine.service", "mask": true},
				map[string]any{"name": "locksmithd.service", "mask": true},
			},
		},
	}
	return json.MarshalIndent(cfg, "", "  ")
}
