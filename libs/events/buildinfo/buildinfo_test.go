package buildinfo

import (
	"os"
	"strings"
	"testing"
)

// A build without -ldflags reports the VERSION file's release.
func TestFileVersionMatchesVERSION(t *testing.T) {
	b, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); fileVersion != want {
		t.Fatalf("fileVersion is %q, the VERSION file says %q: update fileVersion in buildinfo.go", fileVersion, want)
	}
	i := Get()
	if i.Version != fileVersion || i.GitCommit == "" || !strings.HasPrefix(i.GoVersion, "go") {
		t.Fatalf("Get() = %+v", i)
	}
}
