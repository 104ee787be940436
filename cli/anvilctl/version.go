package anvilctl

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is anvilctl's version, set when it is built:
//
//	go build -ldflags "-X github.com/anvil-fleet/anvil/cli/anvilctl.Version=$(cat VERSION)" ./cli/cmd/anvilctl
//
// (or -X main.version=…, as the other binaries take it). Unset, the
// module's version from the build info is used, else "dev".
var Version string

// versionInfo is what GET /version answers, and the client's own.
type versionInfo struct {
	Version   string `json:"version"`
	GitCommit string `json:"git_commit,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
}

// clientVersion is this binary's version, commit and Go version.
func clientVersion() versionInfo {
	v := versionInfo{Version: Version, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.GitCommit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && v.GitCommit != "" {
			v.GitCommit += "-dirty"
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

// versionLine is "0.1.0 (commit 1a2b3c4, go1.26.0)".
func versionLine(v map[string]any) string {
	s := str(v["version"])
	if s == "" {
		s = "unknown"
	}
	var extra []string
	if c := str(v["git_commit"]); c != "" {
		if len(c) > 12 {
			c = c[:12]
		}
		extra = append(extra, "commit "+c)
	}
	if g := str(v["go_version"]); g != "" {
		extra = append(extra, g)
	}
	for i, e := range extra {
		if i == 0 {
			s += " ("
		} else {
			s += ", "
		}
		s += e
	}
	if len(extra) > 0 {
		s += ")"
	}
	return s
}

// printVersions writes the client's and (when known) the server's version.
func printVersions(w io.Writer, p *printer, client, server map[string]any) error {
	if p.human() {
		fmt.Fprintf(w, "Client Version: %s\n", versionLine(client))
		if server != nil {
			fmt.Fprintf(w, "Server Version: %s\n", versionLine(server))
		}
		return nil
	}
	out := map[string]any{"clientVersion": client}
	if server != nil {
		out["serverVersion"] = server
	}
	if !p.data() {
		return usageErr(fmt.Errorf("version prints a table, json, yaml or jsonpath"))
	}
	return p.printData(w, out)
}

func (a *app) versionCmd() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print anvilctl's version and the gateway's",
		Long: "version prints anvilctl's version, and the gateway's as GET /version answers it (no token needed).\n" +
			"A gateway older than that route answers 404: then only the client's version is printed, with a note.",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{noConfig: "true", noToken: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cv := structToMap(clientVersion())
			w := cmd.OutOrStdout()
			if clientOnly {
				return printVersions(w, a.out, cv, nil)
			}
			if err := a.resolve(); err != nil {
				return err
			}
			sv, err := asMap(a.api.Version(cmd.Context()))
			found := !isStatus(err, http.StatusNotFound) // a gateway from before the route
			if !found {
				err = nil
			}
			if err != nil {
				if perr := printVersions(w, a.out, cv, nil); perr != nil {
					return perr
				}
				return fmt.Errorf("the server's version (%s/version): %w", a.cfg.Server, err)
			}
			if !found {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: the server at %s does not tell its version (GET /version: 404); it predates the version route\n", a.cfg.Server)
			}
			return printVersions(w, a.out, cv, sv)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "only the client's version (no request)")
	return cmd
}
