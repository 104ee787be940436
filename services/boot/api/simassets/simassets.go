// Package simassets writes the assets a boot service serves to SIMULATED
// machines: an agent binary per architecture and a Kubernetes sysext per
// version and architecture, under the names services/boot/api gives them.
//
// They are stand-ins, and only for the simulator (sim/) and the test
// harnesses built on it: a simulated machine runs the agent in-process and
// has no kubelet, so these files are served, hashed and put into the
// rendered Ignition like real ones, but never executed or merged. Each file
// says so in its first line. Real machines need real files: `make assets`
// (the agent) and a sysext build or a mirror (see docs/boot.md).
//
// It depends only on the boot service's contract package, so any harness
// can use it without importing a service's internals.
package simassets

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// Marker starts every file this package writes.
const Marker = "anvil simulator asset"

// Write puts the simulator's assets for the given Kubernetes versions
// (x.y.z; an element may also be a comma-separated list, as
// ANVIL_KUBERNETES_VERSIONS is) into dir, which becomes a boot service's
// --assets-dir: dir/assets/anvil-agent-linux-<amd64|arm64> and
// dir/sysext/kubernetes-v<version>-<x86-64|arm64>.raw. A file that already
// has the right contents is left alone (its mtime too, so a boot service
// serving dir does not hash it again); others are written atomically.
func Write(dir string, kubernetesVersions ...string) error {
	if dir == "" {
		return fmt.Errorf("simassets: no directory given")
	}
	files := map[string][]byte{}
	for _, goarch := range bootapi.AgentArches {
		name, err := bootapi.AgentAsset(goarch)
		if err != nil {
			return err
		}
		files[name] = content("agent binary", "linux/"+goarch,
			"simulated machines run the agent in-process; this file is served and hashed, never executed")
	}
	for _, v := range splitVersions(kubernetesVersions) {
		for _, goarch := range bootapi.AgentArches {
			arch, _ := bootapi.SysextArch(goarch)
			name, err := bootapi.SysextAsset(v, arch)
			if err != nil {
				return fmt.Errorf("simassets: %w", err)
			}
			files[name] = content("Kubernetes sysext", "v"+v+" "+arch,
				"simulated machines have no kubelet; this image is served and hashed, never merged")
		}
	}
	for name, b := range files {
		if err := writeIfChanged(filepath.Join(dir, filepath.FromSlash(name)), b); err != nil {
			return fmt.Errorf("simassets: %w", err)
		}
	}
	return nil
}

// Dir writes the assets into a new directory under parent (which must
// exist) and returns it.
func Dir(parent string, kubernetesVersions ...string) (string, error) {
	dir := filepath.Join(parent, "sim-assets")
	return dir, Write(dir, kubernetesVersions...)
}

func splitVersions(in []string) []string {
	var out []string
	for _, s := range in {
		for _, v := range strings.Split(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, strings.TrimPrefix(v, "v"))
			}
		}
	}
	return out
}

// content is distinct per file, so that every file has its own hash.
func content(what, which, why string) []byte {
	return fmt.Appendf(nil, "#!/bin/false\n# %s: %s %s\n# %s\n", Marker, what, which, why)
}

func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".simassets-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
