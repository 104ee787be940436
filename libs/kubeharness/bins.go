package kubeharness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables that the harness reads.
const (
	// EnvBinDir names a directory that holds the control plane binaries. It
	// wins over the cache that tools/kubebins/build.sh fills.
	EnvBinDir = "ANVIL_KUBE_BIN_DIR"
	// EnvCacheDir moves the cache root (default $HOME/.cache/anvil). It must
	// match what build.sh saw.
	EnvCacheDir = "ANVIL_CACHE_DIR"
	// EnvSkip, set to "1", makes Start skip the test instead of failing when
	// there is no control plane to be had.
	EnvSkip = "ANVIL_SKIP_KUBE"
)

// BuildCommand is what a developer runs to get the binaries.
const BuildCommand = "bash tools/kubebins/build.sh"

// binaries are the programs a control plane is made of. The names match
// what tools/kubebins/build.sh installs.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// ErrBinariesMissing is wrapped by the errors that BinDir returns.
var ErrBinariesMissing = errors.New("kubernetes control plane binaries not found")

// BinDir returns the directory that holds etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok: $ANVIL_KUBE_BIN_DIR if
// set, else the directory that build.sh last wrote to
// <cache>/kube/current. The build key is computed only by build.sh, so the
// two cannot disagree about it.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBinDir)
	source := "$" + EnvBinDir
	if dir == "" {
		root, err := cacheRoot()
		if err != nil {
			return "", fmt.Errorf("%w: %v; run `%s`", ErrBinariesMissing, err, BuildCommand)
		}
		current := filepath.Join(root, "kube", "current")
		b, err := os.ReadFile(current)
		if err != nil {
			return "", fmt.Errorf("%w: %s is missing; run `%s` (or set $%s)",
				ErrBinariesMissing, current, BuildCommand, EnvBinDir)
		}
		dir = strings.TrimSpace(string(b))
		source = current
	}
	if err := checkBinaries(dir); err != nil {
		return "", fmt.Errorf("%w in %s (from %s): %v; run `%s`",
			ErrBinariesMissing, dir, source, err, BuildCommand)
	}
	return dir, nil
}

func cacheRoot() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	// build.sh uses $HOME/.cache, not the XDG directory, so do the same.
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "anvil"), nil
}

func checkBinaries(dir string) error {
	var missing []string
	for _, b := range binaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	return nil
}
