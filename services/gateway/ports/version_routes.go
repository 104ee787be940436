package ports

import (
	"context"
	"net/http"

	"github.com/anvil-fleet/anvil/libs/events/buildinfo"
	"github.com/anvil-fleet/anvil/services/gateway/domain"
)

// VersionInfo is what GET /version answers: which gateway build serves
// the API. Clients (anvilctl version) show it next to their own.
type VersionInfo struct {
	// Version is the release (see libs/events/buildinfo).
	Version string `json:"version"`
	// GitCommit is the commit the binary was built from, or "unknown".
	GitCommit string `json:"git_commit"`
	// GoVersion is the Go toolchain that built it (runtime.Version).
	GoVersion string `json:"go_version"`
}

func (h *handler) versionRoutes() []route {
	return []route{{Method: "GET", Path: "/version", Min: domain.RoleNone, Status: http.StatusOK, Response: VersionInfo{},
		Summary: "The gateway's version, commit and Go version (no token needed)",
		Decode:  func(context.Context, *http.Request) (any, error) { return nil, nil },
		Endpoint: func(context.Context, any) (any, error) {
			bi := buildinfo.Get()
			return VersionInfo{Version: bi.Version, GitCommit: bi.GitCommit, GoVersion: bi.GoVersion}, nil
		}}}
}
