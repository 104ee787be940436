package service_test

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/ignition/v2/config/v3_4"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/boot/service"
)

func sha512Hex(b []byte) string {
	s := sha512.Sum512(b)
	return hex.EncodeToString(s[:])
}

func (s *stack) assetFile(name string) []byte {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.assets, filepath.FromSlash(name)))
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func (s *stack) resolve(names ...string) []bootapi.Asset {
	s.t.Helper()
	r, err := bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{Names: names})
	if err != nil {
		s.t.Fatalf("resolve %v: %v", names, err)
	}
	if len(r.Assets) != len(names) {
		s.t.Fatalf("resolve %v: %+v", names, r)
	}
	return r.Assets
}

// TestAssetsServed: the boot service serves its assets with
// http.ServeContent (Range, conditional requests, HEAD, Content-Length),
// with the file's sha512 as ETag and Repr-Digest, and nothing but asset
// names.
func TestAssetsServed(t *testing.T) {
	s := newStack(t)
	const name = "assets/anvil-agent-linux-arm64"
	body := s.assetFile(name)
	sum := sha512Hex(body)

	r := s.get(s.url + "/" + name)
	if r.status != http.StatusOK || r.body != string(body) || r.header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Fatalf("GET: %d %q %v", r.status, r.body, r.header)
	}
	if etag := r.header.Get("ETag"); etag != `"sha512-`+sum+`"` {
		t.Errorf("ETag %s, want the sha512", etag)
	}
	raw, _ := hex.DecodeString(sum)
	if d := r.header.Get("Repr-Digest"); d != "sha-512=:"+base64.StdEncoding.EncodeToString(raw)+":" {
		t.Errorf("Repr-Digest %s", d)
	}

	req, _ := http.NewRequest(http.MethodGet, s.url+"/"+name, nil)
	req.Header.Set("Range", "bytes=2-9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 64)
	n, _ := resp.Body.Read(part)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(part[:n]) != string(body[2:10]) ||
		resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 2-9/%d", len(body)) {
		t.Errorf("Range: %d %q %s", resp.StatusCode, part[:n], resp.Header.Get("Content-Range"))
	}

	req, _ = http.NewRequest(http.MethodGet, s.url+"/"+name, nil)
	req.Header.Set("If-None-Match", r.header.Get("ETag"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if h := do(t, http.DefaultClient, http.MethodHead, s.url+"/"+name, "", nil); h.status != http.StatusOK || h.body != "" ||
		h.header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Errorf("HEAD: %d %q %v", h.status, h.body, h.header)
	}

	// A file beside the assets directory, and names that are no asset.
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.assets), "secret"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.assets, "assets", "notes.txt"), []byte("not an asset"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/assets/../secret", "/assets/%2e%2e/secret", "/assets/..%2fsecret", "/sysext/..%2f..%2fsecret",
		"/assets/notes.txt", "/assets/", "/flatcar/", "/assets/anvil-agent-linux-riscv64", "/sysext/kubernetes-v9.9.9-x86-64.raw",
		"/flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz"} {
		if r := s.get(s.url + p); r.status != http.StatusNotFound || strings.Contains(r.body, "s3cret") || strings.Contains(r.body, "not an asset") {
			t.Errorf("GET %s: %d %q", p, r.status, r.body)
		}
	}
}

// TestAssetsResolvedOverNATS: cmd.boot.assets.resolve answers each name
// with its URL under the public URL, its sha512 and size, or why it is
// missing in words that say what to do; a bad name is a validation error.
func TestAssetsResolvedOverNATS(t *testing.T) {
	s := newStack(t, func(o *stackOptions) {
		o.boot = func(c *service.Config) { c.PublicURL = "http://boot.example:8081" }
	})
	got := s.resolve("assets/anvil-agent-linux-amd64", "sysext/kubernetes-v1.33.4-arm64.raw", "sysext/kubernetes-v1.99.0-x86-64.raw")
	for _, a := range got[:2] {
		b := s.assetFile(a.Name)
		if a.Status != bootapi.AssetReady || a.Hash != "sha512-"+sha512Hex(b) || a.Size != int64(len(b)) ||
			a.Path != "/"+a.Name || a.URL != "http://boot.example:8081/"+a.Name {
			t.Errorf("%s: %+v", a.Name, a)
		}
	}
	if m := got[2]; m.Status != bootapi.AssetMissing || m.Hash != "" ||
		!strings.Contains(m.Reason, "make sysext KUBERNETES_VERSION=1.99.0") || !strings.Contains(m.Reason, "ANVIL_BOOT_SYSEXT_MIRROR") {
		t.Errorf("missing sysext: %+v", m)
	}
	_, err := bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{Names: []string{"../etc/passwd"}})
	if !errs.Is(err, errs.KindValidation) || !strings.Contains(err.Error(), "names[0]") {
		t.Errorf("a bad name: %v", err)
	}
	_, err = bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{})
	if !errs.Is(err, errs.KindValidation) {
		t.Errorf("no names: %v", err)
	}
}

// TestIgnitionFilesServedAndVerified: every remote file in the Ignition a
// machine gets is served by the boot service, with exactly the bytes its
// verification hash names. When a file is replaced in place, the boot
// service notices, drops the configs it rendered with the old hash, and
// the next Ignition carries the new one.
func TestIgnitionFilesServedAndVerified(t *testing.T) {
	s := newStack(t)
	enroll := s.org("acme")
	s.pool("acme", "workers")
	uuid, mac := uuidN(60), macN(60)
	s.register("acme", uuid, mac, enroll)
	s.assign("acme", uuid, "workers", 1)
	b, ign := s.bootMachine("acme", uuid, mac, enroll)
	check := func(raw string) map[string]string {
		cfg, _, err := v3_4.Parse([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		hashes := map[string]string{}
		for _, f := range cfg.Storage.Files {
			src := f.Contents.Source
			if src == nil || strings.HasPrefix(*src, "data:") {
				continue
			}
			if f.Contents.Verification.Hash == nil {
				t.Errorf("%s from %s carries no verification hash", f.Path, *src)
				continue
			}
			r := s.get(*src)
			if r.status != http.StatusOK || "sha512-"+sha512Hex([]byte(r.body)) != *f.Contents.Verification.Hash {
				t.Errorf("%s: GET %s: %d, sha512 %s, Ignition verifies %s", f.Path, *src, r.status, sha512Hex([]byte(r.body)), *f.Contents.Verification.Hash)
			}
			hashes[f.Path] = *f.Contents.Verification.Hash
		}
		if len(hashes) != 2 {
			t.Errorf("remote files: %v", hashes)
		}
		return hashes
	}
	before := check(ign.raw)
	if s.boot.Cache.Len() == 0 {
		t.Fatal("the machine's config is not cached")
	}

	// Rebuild the agent in place (new contents, new mtime).
	p := filepath.Join(s.assets, "assets", "anvil-agent-linux-amd64")
	if err := os.WriteFile(p, []byte("#!/bin/false\n# a rebuilt agent (simulator)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	s.resolve("assets/anvil-agent-linux-amd64")
	s.eventually("the Ignition cache dropped", 10*time.Second, func() (bool, string) {
		return s.boot.Cache.Len() == 0, fmt.Sprint(s.boot.Cache.Len(), " entries")
	})
	after := check(s.ignition(b.ignitionURL).raw)
	if after["/opt/anvil/bin/anvil-agent"] == before["/opt/anvil/bin/anvil-agent"] {
		t.Error("the next Ignition still carries the old agent's hash")
	}
}

// TestSysextMirrorOverNATS: with --sysext-mirror, a sysext the assets
// directory lacks is fetched once from the mirror (a local HTTP server
// here) when a resolve or a machine asks for it, verified against the
// mirror's SHA512SUMS, then resolved and served like any other; one the
// mirror does not have is missing, and the reason says the mirror failed.
func TestSysextMirrorOverNATS(t *testing.T) {
	img := map[string][]byte{
		"kubernetes-v1.34.2-x86-64.raw": []byte("sysext 1.34.2 x86-64 (test mirror)"),
		"kubernetes-v1.34.2-arm64.raw":  []byte("sysext 1.34.2 arm64 (test mirror)"),
	}
	var sums strings.Builder
	for f, b := range img {
		fmt.Fprintf(&sums, "%s  %s\n", sha512Hex(b), f)
	}
	var mu sync.Mutex
	gets := map[string]int{}
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gets[r.URL.Path]++
		mu.Unlock()
		name := strings.TrimPrefix(r.URL.Path, "/bakery/")
		if name == "SHA512SUMS" {
			_, _ = w.Write([]byte(sums.String()))
			return
		}
		if b, ok := img[name]; ok {
			_, _ = w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	defer mirror.Close()
	s := newStack(t, func(o *stackOptions) {
		o.boot = func(c *service.Config) { c.SysextMirror = mirror.URL + "/bakery/kubernetes-v{version}-{arch}.raw" }
	})

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			a, err := bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{Names: []string{"sysext/kubernetes-v1.34.2-x86-64.raw"}})
			if err != nil || a.Assets[0].Status != bootapi.AssetReady && a.Assets[0].Status != bootapi.AssetPending {
				t.Errorf("resolve: %+v %v", a, err)
			}
		})
	}
	wg.Wait()
	s.eventually("the sysext resolved", 30*time.Second, func() (bool, string) {
		a := s.resolve("sysext/kubernetes-v1.34.2-x86-64.raw")[0]
		return a.Status == bootapi.AssetReady && a.Hash == "sha512-"+sha512Hex(img["kubernetes-v1.34.2-x86-64.raw"]), fmt.Sprintf("%+v", a)
	})
	mu.Lock()
	if n := gets["/bakery/kubernetes-v1.34.2-x86-64.raw"]; n != 1 {
		t.Errorf("8 concurrent resolves downloaded the image %d times, want 1", n)
	}
	mu.Unlock()
	if b := s.assetFile("sysext/kubernetes-v1.34.2-x86-64.raw"); string(b) != string(img["kubernetes-v1.34.2-x86-64.raw"]) {
		t.Errorf("on disk: %q", b)
	}
	// A machine asking for one the boot service lacks gets it from the
	// mirror through the boot service.
	if r := s.get(s.url + "/sysext/kubernetes-v1.34.2-arm64.raw"); r.status != http.StatusOK || r.body != string(img["kubernetes-v1.34.2-arm64.raw"]) {
		t.Errorf("GET through the mirror: %d %q", r.status, r.body)
	}
	m := s.resolve("sysext/kubernetes-v1.35.0-x86-64.raw")[0]
	if m.Status != bootapi.AssetMissing || !strings.Contains(m.Reason, "fetching it from the sysext mirror failed") ||
		!strings.Contains(m.Reason, "404") || !strings.Contains(m.Reason, "ANVIL_BOOT_SYSEXT_MIRROR") {
		t.Errorf("not on the mirror: %+v", m)
	}
	t.Logf("reason: %s", m.Reason)
}

// TestNoAssetsDirNoAnswer: a boot service without an assets directory
// serves no asset and does not answer the resolve query, so it never
// answers "missing" for replicas that have the files; with none that has
// them, the caller hears that no boot service answers.
func TestNoAssetsDirNoAnswer(t *testing.T) {
	s := newStack(t, func(o *stackOptions) { o.boot = func(c *service.Config) { c.AssetsDir = "" } })
	_, err := bootapi.ResolveAssets(s.ctx, s.nc, bootapi.ResolveAssetsRequest{Names: []string{"assets/anvil-agent-linux-amd64"}})
	if !errs.Is(err, errs.KindUnavailable) {
		t.Errorf("resolve without an assets directory: %v", err)
	}
	if r := s.get(s.url + "/assets/anvil-agent-linux-amd64"); r.status != http.StatusNotFound {
		t.Errorf("GET without an assets directory: %d", r.status)
	}
}
