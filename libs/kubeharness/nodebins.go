package kubeharness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EnvNodeDir names a node dir (see NodeArtifacts) that wins over the one
// tools/kubebins/node/build.sh last published.
const EnvNodeDir = "ANVIL_KUBE_NODE_DIR"

// NodeBuildCommand builds kubelet, kubeadm, kubectl, the Kubernetes sysext
// and the pause and workload images.
const NodeBuildCommand = "bash tools/kubebins/node/build.sh"

// ErrNodeArtifactsMissing is wrapped by the errors of NodeDir and
// LoadNodeArtifacts when nothing has been built.
var ErrNodeArtifactsMissing = errors.New("kubernetes node artifacts (kubelet, kubeadm, sysext, images) not found")

// NodeArtifacts is what a real worker node is made of, as
// tools/kubebins/node/build.sh built it. Paths are absolute.
type NodeArtifacts struct {
	// Dir is the node dir; its manifest.json is the source of the rest.
	Dir               string
	KubernetesVersion string // "v1.37.1"
	Arch              string // "x86-64", as in the sysext's file name

	Kubelet, Kubeadm, Kubectl string

	// Sysext is kubernetes-<version>-<arch>.raw, a squashfs systemd-sysext
	// image; SysextName is its base name and SysextSHA512 its digest in hex
	// (also in Sysext + ".sha512").
	Sysext       string
	SysextName   string
	SysextSHA512 string

	// PauseImageTar and SleeperImageTar are `docker save` archives for
	// `ctr -n k8s.io images import`. PauseImage is the reference kubeadm
	// and kubelet expect; PauseImageRefs adds the sandbox images that
	// containerd 1.6 and 1.7 ask for when their config names none, all
	// tags of the same image.
	PauseImageTar   string
	PauseImage      string
	PauseImageRefs  []string
	SleeperImageTar string
	SleeperImage    string

	// CNIConfig is an example /etc/cni/net.d conflist for the bridge,
	// host-local and portmap plugins that the sysext ships.
	CNIConfig string
}

// manifest mirrors the part of manifest.json that NodeArtifacts exposes.
type manifest struct {
	KubernetesVersion string `json:"kubernetesVersion"`
	Arch              string `json:"arch"`
	Binaries          map[string]struct {
		Path string `json:"path"`
	} `json:"binaries"`
	CNI struct {
		ExampleConfig string `json:"exampleConfig"`
	} `json:"cni"`
	Sysext struct {
		Name   string `json:"name"`
		Path   string `json:"path"`
		SHA512 string `json:"sha512"`
	} `json:"sysext"`
	Images map[string]struct {
		Path string   `json:"path"`
		Refs []string `json:"refs"`
	} `json:"images"`
	PauseImage   string `json:"pauseImage"`
	SleeperImage string `json:"sleeperImage"`
}

// NodeDir returns $ANVIL_KUBE_NODE_DIR if set, else the directory that
// build.sh last wrote to <cache>/kube-node/current.
func NodeDir() (string, error) {
	if dir := os.Getenv(EnvNodeDir); dir != "" {
		return dir, nil
	}
	root, err := cacheRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %v; run `%s`", ErrNodeArtifactsMissing, err, NodeBuildCommand)
	}
	current := filepath.Join(root, "kube-node", "current")
	b, err := os.ReadFile(current)
	if err != nil {
		return "", fmt.Errorf("%w: %s is missing; run `%s` (or set $%s)",
			ErrNodeArtifactsMissing, current, NodeBuildCommand, EnvNodeDir)
	}
	return strings.TrimSpace(string(b)), nil
}

// LoadNodeArtifacts reads the node dir's manifest.json and checks that
// every file it names exists.
func LoadNodeArtifacts() (*NodeArtifacts, error) {
	dir, err := NodeDir()
	if err != nil {
		return nil, err
	}
	return LoadNodeArtifactsFrom(dir)
}

// LoadNodeArtifactsFrom is LoadNodeArtifacts for a given node dir.
func LoadNodeArtifactsFrom(dir string) (*NodeArtifacts, error) {
	path := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; run `%s`", ErrNodeArtifactsMissing, err, NodeBuildCommand)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (%v); delete %s and run `%s`", path, err, dir, NodeBuildCommand)
	}
	abs := func(p string) string { return filepath.Join(dir, p) }
	a := &NodeArtifacts{
		Dir:               dir,
		KubernetesVersion: m.KubernetesVersion,
		Arch:              m.Arch,
		Kubelet:           abs(m.Binaries["kubelet"].Path),
		Kubeadm:           abs(m.Binaries["kubeadm"].Path),
		Kubectl:           abs(m.Binaries["kubectl"].Path),
		Sysext:            abs(m.Sysext.Path),
		SysextName:        m.Sysext.Name,
		SysextSHA512:      m.Sysext.SHA512,
		PauseImageTar:     abs(m.Images["pause"].Path),
		PauseImage:        m.PauseImage,
		PauseImageRefs:    m.Images["pause"].Refs,
		SleeperImageTar:   abs(m.Images["sleeper"].Path),
		SleeperImage:      m.SleeperImage,
		CNIConfig:         abs(m.CNI.ExampleConfig),
	}
	var missing []string
	for _, f := range []string{a.Kubelet, a.Kubeadm, a.Kubectl, a.Sysext, a.PauseImageTar, a.SleeperImageTar, a.CNIConfig} {
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 || a.KubernetesVersion == "" || a.PauseImage == "" || a.SleeperImage == "" {
		return nil, fmt.Errorf("%w: %s names files that are gone or fields that are empty (missing: %s); run `%s`",
			ErrNodeArtifactsMissing, path, strings.Join(missing, ", "), NodeBuildCommand)
	}
	return a, nil
}

// RequireNodeArtifacts returns the node artifacts, or skips the test with
// one line that names the build command when they are not built.
func RequireNodeArtifacts(t testing.TB) *NodeArtifacts {
	t.Helper()
	a, err := LoadNodeArtifacts()
	if errors.Is(err, ErrNodeArtifactsMissing) {
		t.Skipf("kubeharness: skipping, %v", err) // the error names the build command
	}
	if err != nil {
		t.Fatalf("kubeharness: %v", err)
	}
	return a
}
