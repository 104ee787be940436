package kubeharness_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-fleet/anvil/libs/kubeharness"
)

// The node binaries report the pinned release, as the release binaries do.
func TestNodeBinariesAreVersionStamped(t *testing.T) {
	t.Parallel()
	a := kubeharness.RequireNodeArtifacts(t)
	want := a.KubernetesVersion
	for _, c := range []struct {
		bin  string
		args []string
		out  string
	}{
		{a.Kubelet, []string{"--version"}, "Kubernetes " + want},
		{a.Kubeadm, []string{"version", "-o", "short"}, want},
		{a.Kubectl, []string{"version", "--client", "-o", "yaml"}, "gitVersion: " + want},
	} {
		out, err := exec.CommandContext(t.Context(), c.bin, c.args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.out) {
			t.Errorf("%s %s: %v, output %q; want it to contain %q", filepath.Base(c.bin), strings.Join(c.args, " "), err, out, c.out)
		}
	}
}

// The sysext image holds what Flatcar's Kubernetes extension holds, its
// digest file matches it, and systemd-sysext merges it into a Flatcar-like
// and a Debian-like root (in a mount namespace of its own, gone when the
// merge's shell exits).
func TestSysextImage(t *testing.T) {
	t.Parallel()
	a := kubeharness.RequireNodeArtifacts(t)

	want := fmt.Sprintf("kubernetes-%s-%s.raw", a.KubernetesVersion, a.Arch)
	if a.SysextName != want || filepath.Base(a.Sysext) != want {
		t.Fatalf("sysext %s (%s), want the bakery's name %s", a.SysextName, a.Sysext, want)
	}
	f, err := os.Open(a.Sysext)
	must(t, err)
	h := sha512.New()
	_, err = io.Copy(h, f)
	must(t, f.Close())
	must(t, err)
	sum := hex.EncodeToString(h.Sum(nil))
	file, err := os.ReadFile(a.Sysext + ".sha512")
	must(t, err)
	if sum != a.SysextSHA512 || strings.TrimSpace(string(file)) != sum {
		t.Fatalf("sha512 of %s is %s; manifest says %s, %s.sha512 says %q", a.Sysext, sum, a.SysextSHA512, want, file)
	}

	unsquashfs, err := exec.LookPath("unsquashfs")
	if err != nil {
		t.Fatalf("unsquashfs not found (install Debian's squashfs-tools; %s does): %v", kubeharness.NodeBuildCommand, err)
	}
	listing, err := exec.CommandContext(t.Context(), unsquashfs, "-l", "-d", "", a.Sysext).Output()
	must(t, err)
	for _, p := range []string{
		"/usr/bin/kubelet", "/usr/bin/kubeadm", "/usr/bin/kubectl",
		"/usr/lib/systemd/system/kubelet.service",
		"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
		"/usr/lib/systemd/system/multi-user.target.d/10-kubelet-service.conf",
		"/usr/lib/extension-release.d/extension-release.kubernetes",
		"/usr/local/bin/cni/bridge", "/usr/local/bin/cni/host-local", "/usr/local/bin/cni/loopback", "/usr/local/bin/cni/portmap",
		"/usr/local/share/kubernetes-version",
		"/usr/libexec/kubernetes/kubelet-plugins/volume/exec",
	} {
		if !slices.Contains(strings.Split(string(listing), "\n"), p) {
			t.Errorf("%s lacks %s", want, p)
		}
	}
	cat := func(p string) string {
		out, err := exec.CommandContext(t.Context(), unsquashfs, "-cat", a.Sysext, p).Output()
		if err != nil {
			t.Fatalf("unsquashfs -cat %s: %v", p, err)
		}
		return string(out)
	}
	if got := cat("/usr/lib/extension-release.d/extension-release.kubernetes"); got != "ID=_any\nARCHITECTURE=x86-64\nEXTENSION_RELOAD_MANAGER=1\n" {
		t.Errorf("extension-release.kubernetes = %q", got)
	}
	if got := cat("/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"); !strings.Contains(got,
		"ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n") ||
		!strings.Contains(got, "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n") ||
		!strings.Contains(got, "EnvironmentFile=-/etc/default/kubelet\n") {
		t.Errorf("10-kubeadm.conf = %q", got)
	}
	if got := strings.TrimSpace(cat("/usr/local/share/kubernetes-version")); got != a.KubernetesVersion {
		t.Errorf("kubernetes-version = %q", got)
	}

	// A real merge needs root, systemd-sysext and unshare. Each merge runs
	// in a private mount namespace (made shared inside, for systemd's own
	// child namespace) that ends with its shell; this host runs no
	// systemd, so /run is a fresh tmpfs there.
	if os.Geteuid() != 0 {
		t.Skip("merging the sysext needs root")
	}
	sysext, errS := exec.LookPath("systemd-sysext")
	unshare, errU := exec.LookPath("unshare")
	if errS != nil || errU != nil {
		t.Skipf("merging the sysext needs systemd-sysext and unshare: %v, %v", errS, errU)
	}
	merge := func(name, script string, env ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), unshare, "--mount", "--propagation", "private", "sh", "-c",
			"set -e\nmount --make-rshared /\nmount -t tmpfs tmpfs /run\n"+script)
		cmd.Env = append(os.Environ(), append(env, "SYSEXT="+sysext)...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Kubernetes "+a.KubernetesVersion) {
			t.Errorf("systemd-sysext merge (%s): %v\n%s", name, err, out)
		}
	}

	// Onto this host's own /usr, through a link named kubernetes.raw as on
	// a node (systemd-sysext follows links when it is not given --root).
	merge("this host, linked", `mkdir -p /run/extensions
ln -s "$IMAGE" /run/extensions/kubernetes.raw
"$SYSEXT" merge
/usr/bin/kubelet --version
test -f /usr/lib/systemd/system/kubelet.service
test -f /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf
test -x /usr/local/bin/cni/bridge
`, "IMAGE="+a.Sysext)
	if _, err := os.Stat("/usr/bin/kubelet"); err == nil {
		t.Log("note: this host has a /usr/bin/kubelet of its own; the check above ran it from the merged /usr")
	}

	// Into roots whose os-release is Flatcar's and Debian's: ID=_any
	// matches both. systemd-sysext 252 skips links under --root, so the
	// image is a file here.
	for name, osRelease := range map[string]string{
		"flatcar": "ID=flatcar\nVERSION_ID=4459.2.0\nSYSEXT_LEVEL=1.0\n",
		"debian":  "ID=debian\nVERSION_ID=\"12\"\n",
	} {
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755))
		must(t, os.MkdirAll(filepath.Join(root, "opt"), 0o755))
		must(t, os.MkdirAll(filepath.Join(root, "etc/extensions"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "usr/lib/os-release"), []byte(osRelease), 0o644))
		placeFile(t, a.Sysext, filepath.Join(root, "etc/extensions/kubernetes.raw"))
		merge(name+" root", `"$SYSEXT" --root="$ROOT" merge
"$ROOT/usr/bin/kubelet" --version
test -f "$ROOT/usr/lib/systemd/system/kubelet.service"
`, "ROOT="+root)
		if _, err := os.Stat(filepath.Join(root, "usr/bin/kubelet")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the merge leaked out of its mount namespace: %s/usr/bin/kubelet: %v", root, err)
		}
	}
}

// The images are docker-archive tars tagged with the references kubelet
// and containerd ask for, and the programs in them work: pause holds until
// SIGTERM, sleeper answers HTTP and stops on SIGTERM.
func TestImages(t *testing.T) {
	t.Parallel()
	a := kubeharness.RequireNodeArtifacts(t)
	if !slices.Contains(a.PauseImageRefs, a.PauseImage) || !slices.Contains(a.PauseImageRefs, "registry.k8s.io/pause:3.6") {
		t.Errorf("pause refs %v, want kubeadm's %s and containerd 1.6's registry.k8s.io/pause:3.6", a.PauseImageRefs, a.PauseImage)
	}
	dir := t.TempDir()

	pause := filepath.Join(dir, "pause")
	tags := extractEntrypoint(t, a.PauseImageTar, pause)
	if !slices.Equal(tags, a.PauseImageRefs) {
		t.Errorf("pause.tar is tagged %v, manifest.json says %v", tags, a.PauseImageRefs)
	}
	cmd := exec.CommandContext(t.Context(), pause)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	must(t, cmd.Start())
	// Exit status says whether it handled SIGTERM: killed by the signal
	// would mean it never installed its handler.
	waitForOutput(t, stderr, "first process", cmd)
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Errorf("pause after SIGTERM: %v (stderr %q), want exit 0", err, stderr.String())
	}

	sleeper := filepath.Join(dir, "sleeper")
	if tags := extractEntrypoint(t, a.SleeperImageTar, sleeper); !slices.Equal(tags, []string{a.SleeperImage}) {
		t.Errorf("sleeper.tar is tagged %v, want %s", tags, a.SleeperImage)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	must(t, l.Close())
	cmd = exec.CommandContext(t.Context(), sleeper)
	cmd.Env = []string{"PORT=" + port, "POD_NAME=web-0"}
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	must(t, cmd.Start())
	waitForOutput(t, stderr, "listening", cmd)
	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "web-0" {
		t.Errorf("sleeper answered %q, want web-0", body)
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	if err := cmd.Wait(); err != nil {
		t.Errorf("sleeper after SIGTERM: %v (stderr %q), want exit 0", err, stderr.String())
	}
}

// extractEntrypoint reads a `docker save` archive, writes its image's
// ENTRYPOINT program to dst and returns the archive's tags.
func extractEntrypoint(t *testing.T, archive, dst string) []string {
	t.Helper()
	files := readTar(t, archive, nil)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	must(t, json.Unmarshal(files["manifest.json"], &manifest))
	if len(manifest) != 1 {
		t.Fatalf("%s holds %d images, want 1", archive, len(manifest))
	}
	var config struct {
		Architecture, OS string
		Config           struct{ Entrypoint []string }
	}
	must(t, json.Unmarshal(files[manifest[0].Config], &config))
	if config.OS != "linux" || config.Architecture != "amd64" || len(config.Config.Entrypoint) != 1 {
		t.Fatalf("%s config: %+v", archive, config)
	}
	entry := strings.TrimPrefix(config.Config.Entrypoint[0], "/")
	for _, layer := range manifest[0].Layers {
		if b, ok := readTar(t, "", files[layer])[entry]; ok {
			must(t, os.WriteFile(dst, b, 0o755))
			return manifest[0].RepoTags
		}
	}
	t.Fatalf("%s: no layer holds the entrypoint %s", archive, entry)
	return nil
}

// readTar returns the regular files of a tar (from path, or data when path
// is empty), gunzipping it first when it is compressed.
func readTar(t *testing.T, path string, data []byte) map[string][]byte {
	t.Helper()
	if path != "" {
		var err error
		data, err = os.ReadFile(path)
		must(t, err)
	}
	var r io.Reader = bytes.NewReader(data)
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(r)
		must(t, err)
		r = gz
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		must(t, err)
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			must(t, err)
			files[strings.TrimPrefix(hdr.Name, "./")] = b
		}
	}
}

// waitForOutput polls the program's stderr until it contains want, so that
// a signal is sent only once the program is up.
func waitForOutput(t *testing.T, buf *syncBuffer, want string, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(kubeharness.DefaultWaitTimeout)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("%s did not print %q; stderr so far %q", cmd.Path, want, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// placeFile hard-links src (resolved) to dst, or copies it across file
// systems.
func placeFile(t *testing.T, src, dst string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(src)
	must(t, err)
	if os.Link(real, dst) == nil {
		return
	}
	in, err := os.Open(real)
	must(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

// A containerd of the test's own (Debian's, the version a bookworm node
// runs) imports both archives into the k8s.io namespace, where kubelet
// looks, under every reference kubelet and containerd will ask for.
func TestImagesImportIntoContainerd(t *testing.T) {
	t.Parallel()
	a := kubeharness.RequireNodeArtifacts(t)
	containerd, errD := exec.LookPath("containerd")
	ctr, errC := exec.LookPath("ctr")
	if errD != nil || errC != nil || os.Geteuid() != 0 {
		t.Skipf("importing the images needs root, containerd and ctr (Debian's containerd package): %v, %v", errD, errC)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := filepath.Join(dir, "config.toml")
	must(t, os.WriteFile(config, []byte("version = 2\n"), 0o644))
	daemon := exec.Command(containerd, "--root", filepath.Join(dir, "root"), "--state", filepath.Join(dir, "state"),
		"--address", sock, "--config", config)
	log := &syncBuffer{}
	daemon.Stdout, daemon.Stderr = log, log
	must(t, daemon.Start())
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		_ = daemon.Wait()
		if t.Failed() {
			t.Logf("containerd log:\n%s", log.String())
		}
	})
	out, _ := exec.CommandContext(t.Context(), ctr, "--version").CombinedOutput()
	t.Logf("%s", bytes.TrimSpace(out))

	ctrRun := func(args ...string) string {
		t.Helper()
		var out []byte
		var err error
		deadline := time.Now().Add(kubeharness.DefaultWaitTimeout)
		for {
			// Retried until the socket answers: containerd starts in the
			// background.
			out, err = exec.CommandContext(t.Context(), ctr, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), sock) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, tarball := range []string{a.PauseImageTar, a.SleeperImageTar} {
		// The native snapshotter unpacks without overlay mounts, which
		// this host's kernel may not allow.
		ctrRun("images", "import", "--snapshotter", "native", tarball)
	}
	listed := strings.Fields(ctrRun("images", "ls", "-q"))
	for _, ref := range append(slices.Clone(a.PauseImageRefs), a.SleeperImage) {
		if !slices.Contains(listed, ref) {
			t.Errorf("containerd lists %v after the import, want %s among them", listed, ref)
		}
	}
}
