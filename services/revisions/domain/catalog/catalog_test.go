package catalog

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"1.33.4", true}, {"v1.33.4", true}, {"1.33", false}, {"1.33.04", false}, {"1.-3.4", false},
		{"1.33.4.1", false}, {"", false}, {"1.33.x", false}, {"1.33.+4", false},
	} {
		_, err := ParseVersion(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseVersion(%q) err=%v", tt.in, err)
		}
	}
	if m, err := ParseMinor("v1.33"); err != nil || m != (Minor{Major: 1, Minor: 33}) {
		t.Errorf("ParseMinor = %v, %v", m, err)
	}
	if _, err := ParseMinor("1.33.1"); err == nil {
		t.Error("ParseMinor accepted a full version")
	}
}

func TestCatalog(t *testing.T) {
	c := MustNew("1.33.1", "1.31.9", "1.33.4", "1.32.7", "1.33.2")
	if v, err := c.Latest(Minor{Major: 1, Minor: 33}); err != nil || v.String() != "1.33.4" {
		t.Fatalf("Latest(1.33) = %v, %v", v, err)
	}
	if _, err := c.Latest(Minor{Major: 1, Minor: 30}); err == nil || !strings.Contains(err.Error(), "1.31, 1.32, 1.33") {
		t.Fatalf("Latest(1.30) err = %v", err)
	}
	c2 := c.With(Version{Major: 1, Minor: 33, Patch: 5})
	if v, _ := c2.Latest(Minor{Major: 1, Minor: 33}); v.String() != "1.33.5" {
		t.Fatalf("after With: %v", v)
	}
	if v, _ := c.Latest(Minor{Major: 1, Minor: 33}); v.String() != "1.33.4" {
		t.Fatal("With mutated the original")
	}
	if got := len(c.Versions()); got != 5 {
		t.Fatalf("versions = %d", got)
	}
	if _, err := New("1.33.1", "nope", "1.2"); err == nil || !strings.Contains(err.Error(), "versions[1]") || !strings.Contains(err.Error(), "versions[2]") {
		t.Fatalf("New err = %v", err)
	}
}

func TestSkew(t *testing.T) {
	v := func(s string) Version {
		x, err := ParseVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	tests := []struct {
		cp, kubelet string
		ok          bool
		reason      string
	}{
		{"1.33.4", "1.33.4", true, ""},
		{"1.33.4", "1.33.1", true, ""},
		{"1.33.4", "1.32.9", true, ""},
		{"1.33.4", "1.30.0", true, ""},
		{"1.33.4", "1.29.14", false, "more than 3 minor versions older"},
		{"1.33.4", "1.33.5", false, "newer than the control plane"},
		{"1.33.4", "1.34.0", false, "newer than the control plane"},
		{"2.0.0", "1.33.0", false, "more than 3"},
	}
	for _, tt := range tests {
		err := CheckSkew(v(tt.cp), v(tt.kubelet))
		if (err == nil) != tt.ok {
			t.Errorf("cp %s kubelet %s: err=%v", tt.cp, tt.kubelet, err)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), tt.reason) || !strings.Contains(err.Error(), tt.cp) || !strings.Contains(err.Error(), tt.kubelet)) {
			t.Errorf("cp %s kubelet %s: error %q should give the reason and both versions", tt.cp, tt.kubelet, err)
		}
	}
	c := MustNew("1.33.4")
	if err := c.CheckKubelet(v("1.33.4"), v("1.33.3")); err == nil || !strings.Contains(err.Error(), "not in the catalog") {
		t.Errorf("unknown version: %v", err)
	}
	if err := c.CheckKubelet(Version{}, v("1.33.4")); err == nil {
		t.Error("unknown control plane accepted")
	}
}
