package service

import (
	"strings"
	"testing"
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
	if _, err := (Config{AssetBaseURL: "/flatcar"}).withDefaults(); err != nil {
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
