package simassets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
)

// TestWrite: the agent for both architectures and a sysext per version and
// architecture, under the boot service's names, each distinct and marked
// as a simulator's stand-in; writing again leaves unchanged files alone.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "1.36.4,1.37.1", "v1.33.4"); err != nil {
		t.Fatal(err)
	}
	var names []string
	contents := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.ToSlash(rel)
		if _, err := bootapi.ParseAsset(name); err != nil {
			t.Errorf("%s is not an asset name: %v", name, err)
		}
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), Marker) {
			t.Errorf("%s does not say it is a simulator asset", name)
		}
		if other, dup := contents[string(b)]; dup {
			t.Errorf("%s and %s have the same contents", name, other)
		}
		contents[string(b)] = name
		names = append(names, name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2+3*2 {
		t.Errorf("wrote %v", names)
	}
	p := filepath.Join(dir, "sysext", "kubernetes-v1.37.1-x86-64.raw")
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "1.37.1"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || !st.ModTime().Equal(old) {
		t.Errorf("an unchanged file was rewritten: %v %v", st.ModTime(), err)
	}
	if err := Write(dir, "1.37"); err == nil {
		t.Error("a version without a patch was accepted")
	}
}
