package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseModinfo(t *testing.T) {
	mi := parseModinfo("license=GPL\x00softdep=pre: crc32c post: foo\x00depends=\x00alias=crypto-crc32c\x00alias=crc32c\x00vermagic=6.1.0 SMP\x00")
	want := modinfo{softdeps: []string{"crc32c", "foo"}, aliases: []string{"crypto-crc32c", "crc32c"}}
	if !reflect.DeepEqual(mi, want) {
		t.Fatalf("got %+v, want %+v", mi, want)
	}
	if mi := parseModinfo("depends=nfnetlink,libcrc32c\x00"); !reflect.DeepEqual(mi.depends, []string{"nfnetlink", "libcrc32c"}) {
		t.Fatalf("depends: %q", mi.depends)
	}
}

// The case that broke iptables-nft: nf_tables needs libcrc32c, which
// needs a crc32c implementation only by a soft dependency on an alias.
func TestClosureFollowsDependsSoftdepsAndAliases(t *testing.T) {
	tr := tree{
		info: map[string]modinfo{
			"kernel/net/netfilter/nf_tables.ko":      {depends: []string{"nfnetlink", "libcrc32c"}},
			"kernel/net/netfilter/nfnetlink.ko":      {},
			"kernel/net/netfilter/nft_compat.ko":     {depends: []string{"nf_tables", "x_tables"}},
			"kernel/net/netfilter/x_tables.ko":       {},
			"kernel/lib/libcrc32c.ko":                softdep("pre: crc32c"),
			"kernel/crypto/crc32c_generic.ko":        {aliases: []string{"crypto-crc32c", "crc32c"}},
			"kernel/arch/x86/crypto/crc32c-intel.ko": {aliases: []string{"crc32c"}},
			"kernel/drivers/net/veth.ko":             {},
			"kernel/fs/unrelated.ko":                 {},
			"kernel/net/bridge/br_netfilter.ko":      {depends: []string{"bridge", "ipv6"}},
			"kernel/net/bridge/bridge.ko":            {depends: []string{"stp", "llc"}},
			"kernel/net/802/stp.ko":                  {depends: []string{"llc"}},
			"kernel/net/llc/llc.ko":                  {},
		},
		builtin: map[string]bool{"ipv6": true},
	}
	got, err := tr.closure([]string{"kernel/net/netfilter/", "kernel/drivers/net/veth.ko", "kernel/net/bridge/"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/arch/x86/crypto/crc32c-intel.ko", "kernel/crypto/crc32c_generic.ko", "kernel/drivers/net/veth.ko",
		"kernel/lib/libcrc32c.ko", "kernel/net/802/stp.ko", "kernel/net/bridge/br_netfilter.ko", "kernel/net/bridge/bridge.ko",
		"kernel/net/llc/llc.ko", "kernel/net/netfilter/nf_tables.ko", "kernel/net/netfilter/nfnetlink.ko",
		"kernel/net/netfilter/nft_compat.ko", "kernel/net/netfilter/x_tables.ko",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestClosureErrors(t *testing.T) {
	tr := tree{info: map[string]modinfo{
		"kernel/a/a.ko": {depends: []string{"missing"}},
		"kernel/b/b.ko": softdep("pre: missing-too"),
	}}
	if _, err := tr.closure([]string{"kernel/a/"}); err == nil || !strings.Contains(err.Error(), "depends on missing") {
		t.Errorf("a missing hard dependency: %v", err)
	}
	if got, err := tr.closure([]string{"kernel/b/b.ko"}); err != nil || len(got) != 1 {
		t.Errorf("a missing soft dependency must be ignored: %q, %v", got, err)
	}
	if _, err := tr.closure([]string{"kernel/c/"}); err == nil {
		t.Error("an empty directory selection must fail")
	}
	if _, err := tr.closure([]string{"kernel/a/z.ko"}); err == nil {
		t.Error("a selection that is not a module must fail")
	}
}

func softdep(s string) modinfo { return parseModinfo("softdep=" + s) }
