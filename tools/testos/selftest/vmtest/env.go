package vmtest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// IgnitionStages are the stages the init runs, in order (Flatcar's order).
var IgnitionStages = []string{"fetch-offline", "fetch", "kargs", "disks", "mount", "files", "umount"}

// FindQEMU returns qemu-system-x86_64, running `make qemu` (which installs
// it from Debian as root) when it is missing, and skips when it stays
// missing.
func FindQEMU(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the test OS is an x86-64 Linux image; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		return p
	}
	make := exec.Command("make", "-C", RepoRoot(t), "qemu")
	out, err := make.CombinedOutput()
	t.Logf("make qemu: %v\n%s", err, out)
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is missing (make qemu installs it as root); skipping the test OS self-test")
	}
	return p
}

// RepoRoot is the anvil repository: the first directory above the working
// directory that has agent/cmd/anvil-agent.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "agent", "cmd", "anvil-agent")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			t.Fatalf("no anvil repository (a directory with agent/cmd/anvil-agent) above %s", wd)
		}
	}
}

// BuildImage runs tools/testos/build.sh for a variant (a no-op when the
// cache is warm), or takes the directory in the environment variable
// dirEnv when it is set.
func BuildImage(t testing.TB, repo, variant, dirEnv string) string {
	t.Helper()
	if dir := os.Getenv(dirEnv); dir != "" {
		t.Logf("using the image in %s (%s)", dir, dirEnv)
		return dir
	}
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(repo, "tools", "testos", "build.sh"), "--variant", variant, "--print-dir")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = lineLogger{t}
	if err := cmd.Run(); err != nil {
		t.Fatalf("tools/testos/build.sh --variant %s: %v (its output is above)", variant, err)
	}
	dir := strings.TrimSpace(stdout.String())
	t.Logf("%s image %s (build.sh took %.1fs)", variant, dir, time.Since(start).Seconds())
	return dir
}

// BuildAgent builds the real anvil-agent, statically, from the agent
// module (GOWORK=off: the agent module stands alone).
func BuildAgent(t testing.TB, repo string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "anvil-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=selftest", "-o", out, "./cmd/anvil-agent")
	cmd.Dir = filepath.Join(repo, "agent")
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./agent/cmd/anvil-agent: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type lineLogger struct{ t testing.TB }

func (l lineLogger) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		l.t.Log(sc.Text())
	}
	return len(p), nil
}

// RandomUUID is a random (version 4) SMBIOS UUID for a VM.
func RandomUUID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// RandomToken is n random characters of [A-Za-z0-9] (crypto/rand, so
// there is no seed to log).
func RandomToken(t testing.TB, n int) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// ClosedPort returns a loopback port that nothing listens on (the kernel
// picked it, then it was closed).
func ClosedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
