package vmtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// NodeArtifacts is the part of tools/kubebins/node/build.sh's
// manifest.json the self-tests need.
type NodeArtifacts struct {
	Dir               string `json:"-"`
	KubernetesVersion string `json:"kubernetesVersion"`
	Sysext            struct {
		Name   string `json:"name"`
		Path   string `json:"path"` // relative to Dir
		SHA512 string `json:"sha512"`
	} `json:"sysext"`
	PauseImage   string `json:"pauseImage"`
	SleeperImage string `json:"sleeperImage"`
}

// SysextPath is the sysext image's absolute path.
func (n NodeArtifacts) SysextPath() string { return filepath.Join(n.Dir, n.Sysext.Path) }

// LoadNodeArtifacts reads the node artifacts that the kubernetes image in
// imageDir was built with (its manifest names them), so that the sysext a
// test serves and the images baked into the image come from the same
// build; ANVIL_TESTOS_KUBE_NODE_DIR overrides.
func LoadNodeArtifacts(t testing.TB, imageDir string) NodeArtifacts {
	t.Helper()
	dir := os.Getenv("ANVIL_TESTOS_KUBE_NODE_DIR")
	if dir == "" {
		var m struct {
			NodeArtifacts string `json:"node_artifacts"`
		}
		b, err := os.ReadFile(filepath.Join(imageDir, "manifest.json"))
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil || m.NodeArtifacts == "" {
			t.Fatalf("reading node_artifacts from %s/manifest.json: %v", imageDir, err)
		}
		dir = m.NodeArtifacts
	}
	var n NodeArtifacts
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &n)
	}
	if err != nil {
		t.Fatalf("reading the Kubernetes node artifacts' manifest in %s: %v (build them with tools/kubebins/node/build.sh)", dir, err)
	}
	n.Dir = dir
	if n.Sysext.Name == "" || n.Sysext.SHA512 == "" || n.KubernetesVersion == "" {
		t.Fatalf("%s/manifest.json lacks the sysext's name or sha512, or the Kubernetes version", dir)
	}
	return n
}
