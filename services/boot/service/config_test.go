package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/svc"
)

func TestConfigDefaultsAndErrors(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != DefaultListen || c.AssetBaseURL != DefaultAssetBaseURL || c.BootTokenTTL != DefaultBootTokenTTL ||
		len(c.kernelArgs()) != 2 || c.IgnitionCacheBytes != DefaultCacheBytes || c.Service != Name {
		t.Errorf("defaults: %+v", c)
	}
	if _, err := (Config{AssetBaseURL: "/flatcar", AssetsDir: t.TempDir()}).withDefaults(); err != nil {
		t.Errorf("a relative asset path: %v", err)
	}
	_, err = Config{
		PublicURL: "http://boot/${x}", TLSPublicURL: "http://not-https", TLSListen: "127.0.0.1:8443",
		AssetBaseURL: "ftp://mirror", KernelArgs: "ignition.config.url=http://evil", SigningKeys: "Zm9vYmFy",
		RetryInitial: 10, RetryMax: 5,
	}.withDefaults()
	for _, want := range []string{"--public-url / ANVIL_BOOT_PUBLIC_URL", "--tls-public-url", "--tls-listen", "--asset-base-url",
		"--kernel-args", "--signing-keys / ANVIL_BOOT_SIGNING_KEYS", "--ipxe-retry-max"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Zm9vYmFy") {
		t.Error("the error quotes the key")
	}
}

// TestConfigAssets: the public URL must be an absolute http(s) URL, the
// assets directory must exist and be a directory, and the settings that
// need it say so; every refusal names the flag and the variable.
func TestConfigAssets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mirror := "https://mirror.example/kubernetes-v{version}-{arch}.raw"
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"public URL without scheme": {Config{PublicURL: "boot.example:8081"}, "--public-url / ANVIL_BOOT_PUBLIC_URL: must be an absolute http(s) URL"},
		"public URL ftp":            {Config{PublicURL: "ftp://boot.example"}, "--public-url / ANVIL_BOOT_PUBLIC_URL"},
		"public URL relative":       {Config{PublicURL: "/boot"}, "--public-url / ANVIL_BOOT_PUBLIC_URL"},
		"assets dir missing":        {Config{AssetsDir: filepath.Join(dir, "nope")}, "--assets-dir / ANVIL_BOOT_ASSETS_DIR: stat"},
		"assets dir is a file":      {Config{AssetsDir: file}, "--assets-dir / ANVIL_BOOT_ASSETS_DIR: " + file + " is not a directory"},
		"mirror without arch":       {Config{AssetsDir: dir, SysextMirror: "https://m.example/k-{version}.raw"}, "--sysext-mirror / ANVIL_BOOT_SYSEXT_MIRROR: must contain {version} and {arch}"},
		"mirror not http":           {Config{AssetsDir: dir, SysextMirror: "file:///k-{version}-{arch}.raw"}, "--sysext-mirror / ANVIL_BOOT_SYSEXT_MIRROR"},
		"mirror without assets dir": {Config{SysextMirror: mirror}, "--sysext-mirror / ANVIL_BOOT_SYSEXT_MIRROR: needs --assets-dir"},
		"local Flatcar without dir": {Config{AssetBaseURL: "/flatcar"}, "--asset-base-url / ANVIL_BOOT_ASSET_BASE_URL"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
		}
	}
	if err := (Config{Config: svc.Config{StreamReplicas: 1}, PublicURL: "http://10.0.0.5:8081/", AssetsDir: dir, SysextMirror: mirror}).Validate(); err != nil {
		t.Errorf("good settings: %v", err)
	}
}
