// Package buildinfo says which build of anvil is running: one answer for
// the anvil_build_info metric of every service and the gateway's
// GET /version.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Set by the linker (deploy/images/build.sh does):
//
//	-ldflags "-X github.com/anvil-fleet/anvil/libs/events/buildinfo.version=$(cat VERSION)
//	          -X github.com/anvil-fleet/anvil/libs/events/buildinfo.gitCommit=$(git rev-parse HEAD)"
var version, gitCommit string

// fileVersion is the VERSION file's content, kept equal to it by a test:
// what a build without -ldflags (go run, go test) reports.
const fileVersion = "0.1.0"

// Info describes the running binary.
type Info struct {
	// Version is the release: stamped at link time, else the VERSION file.
	Version string
	// GitCommit is the commit the binary was built from: stamped at link
	// time, else the Go toolchain's vcs.revision (with "-dirty" when the
	// work tree had changes), else "unknown" (-buildvcs=false, or a build
	// outside a checkout).
	GitCommit string
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Get returns the running binary's build information.
var Get = sync.OnceValue(func() Info {
	i := Info{Version: version, GitCommit: gitCommit, GoVersion: runtime.Version()}
	if i.Version == "" {
		i.Version = fileVersion
	}
	if i.GitCommit == "" {
		i.GitCommit = vcsRevision()
	}
	return i
})

func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
