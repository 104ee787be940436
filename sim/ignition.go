package sim

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/anvil-fleet/anvil/agent"
)

// Paths in the rendered Ignition config that the simulator reads (the
// revisions service's renderer writes them; see
// services/revisions/domain/render).
const (
	HostnamePath   = "/etc/hostname"
	RevisionPath   = "/etc/anvil/revision"
	AgentEnvPath   = "/etc/anvil/agent.env"
	JoinConfigPath = "/etc/kubeadm/join.yaml"
)

// BootConfig is what a simulated machine takes from its Ignition config.
type BootConfig struct {
	// Hostname is /etc/hostname; it names the Node.
	Hostname string
	// Revision is the machine revision id ("mr-…") from /etc/anvil/revision,
	// or ANVIL_MACHINE_REVISION from the env file when the file is absent.
	Revision string
	// Env is the agent's env file (/etc/anvil/agent.env): ANVIL_URL or
	// ANVIL_BOOT_URL, ANVIL_AGENT_CREDENTIAL, ….
	Env map[string]string
	// NodeName, NodeLabels and Taints come from the kubeadm join
	// configuration (nodeRegistration: name, the kubelet's --node-labels,
	// taints); NodeName falls back to Hostname.
	NodeName   string
	NodeLabels map[string]string
	Taints     []corev1.Taint
}

// ignitionConfig is the part of an Ignition 3.x config the simulator reads.
type ignitionConfig struct {
	Ignition struct {
		Version string `json:"version"`
	} `json:"ignition"`
	Storage struct {
		Files []struct {
			Path     string `json:"path"`
			Contents struct {
				Source *string `json:"source"`
			} `json:"contents"`
		} `json:"files"`
	} `json:"storage"`
}

// ParseIgnition reads what a machine needs from an Ignition config: the
// files written from data URLs (remote sources such as the agent binary and
// the Kubernetes sysext are not fetched).
func ParseIgnition(data []byte) (*BootConfig, error) {
	var cfg ignitionConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("ignition config is not JSON: %w", err)
	}
	if !strings.HasPrefix(cfg.Ignition.Version, "3.") {
		return nil, fmt.Errorf("ignition config version %q: want 3.x", cfg.Ignition.Version)
	}
	files := map[string]string{}
	for _, f := range cfg.Storage.Files {
		if f.Contents.Source == nil || !strings.HasPrefix(*f.Contents.Source, "data:") {
			continue
		}
		b, err := decodeDataURL(*f.Contents.Source)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		files[f.Path] = string(b)
	}

	bc := &BootConfig{NodeLabels: map[string]string{}}
	bc.Hostname = strings.TrimSpace(files[HostnamePath])
	env, ok := files[AgentEnvPath]
	if !ok {
		return nil, fmt.Errorf("the config writes no %s", AgentEnvPath)
	}
	var err error
	if bc.Env, err = agent.ParseEnvFile([]byte(env)); err != nil {
		return nil, fmt.Errorf("%s: %w", AgentEnvPath, err)
	}
	if rev, ok := files[RevisionPath]; ok {
		line, _, _ := strings.Cut(rev, "\n")
		bc.Revision = strings.TrimSpace(line)
	} else {
		bc.Revision = strings.TrimSpace(bc.Env[agent.EnvMachineRevision])
	}
	if join, ok := files[JoinConfigPath]; ok {
		if err := bc.readJoin([]byte(join)); err != nil {
			return nil, fmt.Errorf("%s: %w", JoinConfigPath, err)
		}
	}
	if bc.NodeName == "" {
		bc.NodeName = bc.Hostname
	}
	if bc.NodeName == "" {
		return nil, errors.New("the config names no host (no /etc/hostname, no node name)")
	}
	return bc, nil
}

// readJoin reads kubeadm's JoinConfiguration, v1beta3 (kubeletExtraArgs a
// map) or v1beta4 (a list of name/value pairs).
func (bc *BootConfig) readJoin(data []byte) error {
	var jc struct {
		NodeRegistration struct {
			Name             string          `json:"name"`
			KubeletExtraArgs json.RawMessage `json:"kubeletExtraArgs"`
			Taints           []struct {
				Key    string `json:"key"`
				Value  string `json:"value"`
				Effect string `json:"effect"`
			} `json:"taints"`
		} `json:"nodeRegistration"`
	}
	if err := yaml.Unmarshal(data, &jc); err != nil {
		return err
	}
	nr := jc.NodeRegistration
	bc.NodeName = nr.Name
	for _, t := range nr.Taints {
		bc.Taints = append(bc.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	args := map[string]string{}
	if len(nr.KubeletExtraArgs) > 0 && string(nr.KubeletExtraArgs) != "null" {
		var list []struct{ Name, Value string }
		if err := json.Unmarshal(nr.KubeletExtraArgs, &list); err == nil {
			for _, a := range list {
				args[a.Name] = a.Value
			}
		} else if err := json.Unmarshal(nr.KubeletExtraArgs, &args); err != nil {
			return fmt.Errorf("kubeletExtraArgs is neither a list nor a map")
		}
	}
	if v := args["node-labels"]; v != "" {
		for pair := range strings.SplitSeq(v, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(pair), "=")
			if k != "" {
				bc.NodeLabels[k] = val
			}
		}
	}
	return nil
}

// decodeDataURL decodes an RFC 2397 data URL.
func decodeDataURL(s string) ([]byte, error) {
	meta, data, ok := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
	if !ok {
		return nil, errors.New("data URL without a comma")
	}
	if strings.HasSuffix(meta, ";base64") {
		unescaped, err := url.PathUnescape(data)
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.DecodeString(unescaped)
	}
	unescaped, err := url.PathUnescape(data)
	return []byte(unescaped), err
}

// sortedLabels renders labels for logs and events.
func sortedLabels(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}
