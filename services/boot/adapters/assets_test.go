package adapters

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/app"
)

func sha512Of(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + hex.EncodeToString(s[:])
}

func writeAsset(t testing.TB, dir, name, content string, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestAssetIndexHashesOnceAndOnChange: a file is hashed when first asked
// for, not again while its size and mtime stay, and again (with the change
// reported) when they move.
func TestAssetIndexHashesOnceAndOnChange(t *testing.T) {
	dir := t.TempDir()
	const agent = "assets/anvil-agent-linux-amd64"
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	writeAsset(t, dir, agent, "agent v1", t0)
	var changed []string
	var mu sync.Mutex
	x := NewAssetIndex(dir, nil, quiet(), func(name string) { mu.Lock(); changed = append(changed, name); mu.Unlock() })
	hashes := func() float64 { return testutil.ToFloat64(assetHashes.WithLabelValues(bootapi.KindAgent)) }
	before := hashes()

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			info, err := x.Lookup(context.Background(), agent)
			if err != nil || info.Hash != sha512Of([]byte("agent v1")) || info.Size != 8 {
				t.Errorf("lookup: %+v %v", info, err)
			}
		})
	}
	wg.Wait()
	if n := hashes() - before; n != 1 {
		t.Errorf("50 lookups of an unchanged file hashed it %v times, want 1", n)
	}

	// Same size, new mtime and contents: hashed again, reported.
	writeAsset(t, dir, agent, "agent v2", t0.Add(time.Minute))
	info, err := x.Lookup(context.Background(), agent)
	if err != nil || info.Hash != sha512Of([]byte("agent v2")) {
		t.Fatalf("after a change: %+v %v", info, err)
	}
	if n := hashes() - before; n != 2 {
		t.Errorf("hashed %v times after one change, want 2", n)
	}
	mu.Lock()
	if len(changed) != 1 || changed[0] != agent {
		t.Errorf("changes reported: %v", changed)
	}
	mu.Unlock()

	// A touch without new contents: hashed again (it cannot know without
	// reading), but not reported as a change.
	if err := os.Chtimes(filepath.Join(dir, agent), t0.Add(2*time.Minute), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Lookup(context.Background(), agent); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(changed) != 1 {
		t.Errorf("a touch was reported as a change: %v", changed)
	}
	mu.Unlock()

	// Open serves exactly the indexed file.
	f, err := x.Open(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "agent v2" || f.Info().Hash != sha512Of(b) {
		t.Errorf("open: %q %+v", b, f.Info())
	}
}

// TestAssetIndexNames: only asset names are looked up; nothing leaves the
// directory, and what is not a regular file is missing.
func TestAssetIndexNames(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "assets-dir")
	writeAsset(t, root, "secret", "outside", time.Time{})
	writeAsset(t, dir, "sysext/kubernetes-v1.33.4-x86-64.raw", "sysext", time.Time{})
	writeAsset(t, dir, "flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz", "kernel", time.Time{})
	if err := os.MkdirAll(filepath.Join(dir, "assets/anvil-agent-linux-arm64"), 0o755); err != nil { // a directory
		t.Fatal(err)
	}
	x := NewAssetIndex(dir, nil, quiet(), nil)
	ctx := context.Background()
	for _, name := range []string{
		"", "secret", "../secret", "/etc/passwd", "assets/../../secret", "assets/anvil-agent-linux-amd64/../../../secret",
		"assets/anvil-agent-linux-riscv64", "assets/anvil-agent", "assets/other", "sysext/../../secret",
		"sysext/kubernetes-v1.33-x86-64.raw", "sysext/kubernetes-v1.33.4-amd64.raw", "sysext/kubernetes-v01.33.4-x86-64.raw",
		"sysext/.kubernetes-v1.33.4-x86-64.raw.download-1", "flatcar/stable/../../../secret", "flatcar/../stable/4230.2.3/f",
		"flatcar/stable/4230.2.3", "flatcar/./4230.2.3/f", "flatcar/.hidden/4230.2.3/f", "flatcar/stable/4230.2.3/f/g",
		"flatcar/stable/4230.2.3/..", "assets\\..\\secret", "sysext/kubernetes-v1.33.4-x86-64.raw\x00",
		"assets/anvil-agent-linux-amd64?x", strings.Repeat("a", 600),
	} {
		if _, err := x.Lookup(ctx, name); !errs.Is(err, errs.KindValidation) {
			t.Errorf("Lookup(%q) = %v, want a validation error", name, err)
		}
		if _, err := bootapi.ParseAsset(name); err == nil {
			t.Errorf("ParseAsset(%q) accepted it", name)
		}
	}
	for _, name := range []string{"sysext/kubernetes-v1.33.4-x86-64.raw", "flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz"} {
		if _, err := x.Lookup(ctx, name); err != nil {
			t.Errorf("Lookup(%q): %v", name, err)
		}
	}
	for _, name := range []string{"assets/anvil-agent-linux-arm64", "assets/anvil-agent-linux-amd64", "sysext/kubernetes-v1.34.0-arm64.raw"} {
		if _, err := x.Lookup(ctx, name); !errs.Is(err, errs.KindNotFound) {
			t.Errorf("Lookup(%q) = %v, want not found", name, err)
		}
	}
	found, ignored, err := x.Scan(ctx)
	if err != nil || len(found) != 2 || len(ignored) != 0 {
		t.Errorf("scan: %+v %v %v", found, ignored, err)
	}
	none := NewAssetIndex("", nil, quiet(), nil)
	if _, err := none.Lookup(ctx, "assets/anvil-agent-linux-amd64"); !errs.Is(err, errs.KindNotFound) || !strings.Contains(err.Error(), "ANVIL_BOOT_ASSETS_DIR") {
		t.Errorf("no directory: %v", err)
	}
}

// mirror is a local HTTP server standing in for a sysext mirror: it serves
// files from a map and counts the GETs of each path. A path in hold waits
// until release is closed.
type mirror struct {
	srv     *httptest.Server
	mu      sync.Mutex
	files   map[string][]byte
	status  map[string]int
	gets    map[string]int
	hold    string
	release chan struct{}
}

func newMirror(t testing.TB) *mirror {
	m := &mirror{files: map[string][]byte{}, status: map[string]int{}, gets: map[string]int{}, release: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.gets[r.URL.Path]++
		b, ok := m.files[r.URL.Path]
		st := m.status[r.URL.Path]
		hold := m.hold == r.URL.Path
		m.mu.Unlock()
		if hold {
			<-m.release
		}
		switch {
		case st != 0:
			w.WriteHeader(st)
		case !ok:
			http.NotFound(w, r)
		default:
			_, _ = w.Write(b)
		}
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mirror) put(path string, b []byte) { m.mu.Lock(); m.files[path] = b; m.mu.Unlock() }
func (m *mirror) count(path string) int     { m.mu.Lock(); defer m.mu.Unlock(); return m.gets[path] }

const mirrorPath = "/releases/kubernetes-v{version}/kubernetes-v{version}-{arch}.raw"

func newMirrorIndex(t testing.TB, m *mirror) (*AssetIndex, string) {
	dir := t.TempDir()
	mm := &SysextMirror{Template: m.srv.URL + mirrorPath, Dir: filepath.Join(dir, bootapi.SysextDir), Log: quiet()}
	if err := CheckMirrorTemplate(mm.Template); err != nil {
		t.Fatal(err)
	}
	return NewAssetIndex(dir, mm, quiet(), nil), dir
}

// TestSysextMirror: a missing sysext is fetched once however many ask at
// once, verified against the mirror's SHA512SUMS, put in place and then
// served from disk; later lookups do not go to the mirror.
func TestSysextMirror(t *testing.T) {
	m := newMirror(t)
	img := []byte("a Kubernetes sysext image (test)")
	m.put("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw", img)
	m.put("/releases/kubernetes-v1.33.4/SHA512SUMS", fmt.Appendf(nil, "%s  kubernetes-v1.33.4-arm64.raw\n%s  kubernetes-v1.33.4-x86-64.raw\n",
		strings.Repeat("0", 128), strings.TrimPrefix(sha512Of(img), "sha512-")))
	x, dir := newMirrorIndex(t, m)
	const name = "sysext/kubernetes-v1.33.4-x86-64.raw"
	verified := testutil.ToFloat64(mirrorFetches.WithLabelValues("verified"))
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			info, err := x.Lookup(context.Background(), name)
			if err != nil || info.Hash != sha512Of(img) {
				t.Errorf("lookup: %+v %v", info, err)
			}
		})
	}
	wg.Wait()
	if n := m.count("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw"); n != 1 {
		t.Errorf("the image was downloaded %d times, want 1", n)
	}
	if n := testutil.ToFloat64(mirrorFetches.WithLabelValues("verified")) - verified; n != 1 {
		t.Errorf("verified downloads: %v", n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != string(img) {
		t.Fatalf("on disk: %q %v", b, err)
	}
	if _, err := x.Lookup(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if n := m.count("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw"); n != 1 {
		t.Errorf("a lookup of a fetched image went to the mirror again (%d GETs)", n)
	}
	noTemp(t, filepath.Join(dir, bootapi.SysextDir))

	// <url>.sha512 is tried first.
	arm := []byte("arm64 image")
	m.put("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-arm64.raw", arm)
	m.put("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-arm64.raw.sha512", []byte(strings.TrimPrefix(sha512Of(arm), "sha512-")+"\n"))
	if info, err := x.Lookup(context.Background(), "sysext/kubernetes-v1.33.4-arm64.raw"); err != nil || info.Hash != sha512Of(arm) {
		t.Errorf("with a .sha512 file: %+v %v", info, err)
	}
}

// TestSysextMirrorFailures: a corrupt download, a mirror without the
// image and a checksum the mirror fails to serve are errors that say so;
// nothing is left in the directory. Without any checksum the image is
// taken (and hashed here).
func TestSysextMirrorFailures(t *testing.T) {
	m := newMirror(t)
	x, dir := newMirrorIndex(t, m)
	ctx := context.Background()
	sysdir := filepath.Join(dir, bootapi.SysextDir)

	m.put("/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw", []byte("tampered"))
	m.put("/releases/kubernetes-v1.33.4/SHA512SUMS", []byte(strings.Repeat("ab", 64)+"  kubernetes-v1.33.4-x86-64.raw\n"))
	_, err := x.Lookup(ctx, "sysext/kubernetes-v1.33.4-x86-64.raw")
	var fe *app.AssetFetchError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt download: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(sysdir, "kubernetes-v1.33.4-x86-64.raw")); serr == nil {
		t.Error("a corrupt download was put in place")
	}

	_, err = x.Lookup(ctx, "sysext/kubernetes-v1.31.0-x86-64.raw")
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing on the mirror: %v", err)
	}

	m.put("/releases/kubernetes-v1.32.0/kubernetes-v1.32.0-x86-64.raw", []byte("img"))
	m.mu.Lock()
	m.status["/releases/kubernetes-v1.32.0/kubernetes-v1.32.0-x86-64.raw.sha512"] = http.StatusInternalServerError
	m.mu.Unlock()
	if _, err = x.Lookup(ctx, "sysext/kubernetes-v1.32.0-x86-64.raw"); !errors.As(err, &fe) || !strings.Contains(err.Error(), "500") {
		t.Errorf("checksum unreadable: %v", err)
	}

	m.put("/releases/kubernetes-v1.30.1/kubernetes-v1.30.1-x86-64.raw", []byte("unsigned"))
	if info, err := x.Lookup(ctx, "sysext/kubernetes-v1.30.1-x86-64.raw"); err != nil || info.Hash != sha512Of([]byte("unsigned")) {
		t.Errorf("no checksum published: %+v %v", info, err)
	}
	noTemp(t, sysdir)
}

// TestSysextMirrorPending: a lookup that ends before the download answers
// pending; the download goes on, and a later lookup finds the image.
func TestSysextMirrorPending(t *testing.T) {
	m := newMirror(t)
	img := []byte("slow image")
	const path = "/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw"
	m.put(path, img)
	m.hold = path
	x, _ := newMirrorIndex(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var pending *app.AssetPendingError
	if _, err := x.Lookup(ctx, "sysext/kubernetes-v1.33.4-x86-64.raw"); !errors.As(err, &pending) || pending.URL != m.srv.URL+"/releases/kubernetes-v1.33.4/kubernetes-v1.33.4-x86-64.raw" {
		t.Fatalf("a lookup that cannot wait: %v", err)
	}
	close(m.release)
	info, err := x.Lookup(context.Background(), "sysext/kubernetes-v1.33.4-x86-64.raw")
	if err != nil || info.Hash != sha512Of(img) {
		t.Fatalf("after the download: %+v %v", info, err)
	}
	if n := m.count(path); n != 1 {
		t.Errorf("downloaded %d times", n)
	}
}

func noTemp(t testing.TB, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestCheckMirrorTemplate(t *testing.T) {
	for tmpl, ok := range map[string]bool{
		"https://m.example/kubernetes-v{version}-{arch}.raw":      true,
		"http://10.0.0.5:8080/sysext/{version}/{arch}/image.raw":  true,
		"https://m.example/kubernetes-v{version}.raw":             false,
		"ftp://m.example/kubernetes-v{version}-{arch}.raw":        false,
		"/sysext/kubernetes-v{version}-{arch}.raw":                false,
		"https://m.example/kubernetes-v{version}-{arch}.raw#frag": false,
	} {
		if err := CheckMirrorTemplate(tmpl); (err == nil) != ok {
			t.Errorf("%s: %v", tmpl, err)
		}
	}
}
