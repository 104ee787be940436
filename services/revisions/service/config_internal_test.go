package service

import (
	"flag"
	"strings"
	"testing"
)

// TestSysextURLRemoved: ANVIL_SYSEXT_URL is no longer read; one left in an
// environment is refused at start rather than silently ignored.
func TestSysextURLRemoved(t *testing.T) {
	t.Setenv("ANVIL_SYSEXT_URL", "https://old.example/sysext")
	var c Config
	c.RegisterFlags(flag.NewFlagSet("revisions", flag.ContinueOnError))
	c.BootURL = "https://boot.example"
	if _, _, err := c.renderOptions(); err == nil || !strings.Contains(err.Error(), "ANVIL_SYSEXT_URL") || !strings.Contains(err.Error(), "ANVIL_BOOT_SYSEXT_MIRROR") {
		t.Fatalf("ANVIL_SYSEXT_URL set: %v", err)
	}
	t.Setenv("ANVIL_SYSEXT_URL", "")
	var ok Config
	ok.RegisterFlags(flag.NewFlagSet("revisions", flag.ContinueOnError))
	if _, _, err := ok.renderOptions(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
