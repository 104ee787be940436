package anvilctl

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// catalogCmd reads and grows the platform-wide Kubernetes version catalog.
func (a *app) catalogCmd() *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "catalog", Short: "The Kubernetes versions pools can run (platform-wide)"})
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Short:   "List the Kubernetes versions in the catalog, by minor",
		Example: "  anvilctl catalog list\n  anvilctl catalog list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := asMap(a.api.GetCatalog(cmd.Context()))
			if err != nil {
				return err
			}
			return printCatalog(cmd, a.out, cat)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "add-version <x.y.z>",
		Short: "Add a Kubernetes patch version to the catalog (the platform administrator's token)",
		Long: "add-version adds a Kubernetes version to the platform-wide catalog. It needs the bootstrap admin\n" +
			"token (ANVIL_ADMIN_TOKEN of the control plane); an organization's token is refused.\n\n" +
			"Every pool on the version's minor then gets a platform-made revision to it. A pool with\n" +
			"auto_apply_platform_revisions: true also has it rolled out, in its maintenance windows; the others\n" +
			"keep it pending until someone applies it. Pools whose cluster's control plane is older than the\n" +
			"version are held back (the skew policy: a kubelet is never newer than its control plane).",
		Example: "  anvilctl catalog add-version 1.33.6",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := asMap(a.api.AddCatalogVersion(cmd.Context(), args[0]))
			if err != nil {
				return err
			}
			if !a.out.human() {
				return a.out.printObject(cmd.OutOrStdout(), nil, cat, nil)
			}
			v := strings.TrimPrefix(args[0], "v")
			minor := v
			if i := strings.LastIndex(v, "."); i > 0 {
				minor = v[:i]
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Kubernetes %s added to the catalog. Pools on %s get a platform revision to it: applied in their\n"+
				"maintenance windows where auto_apply_platform_revisions is on, pending elsewhere (see `anvilctl get revisions --pool <pool>`).\n", v, minor)
			return nil
		},
	})
	return cmd
}

// printCatalog writes the catalog: one row per minor, or the whole object.
func printCatalog(cmd *cobra.Command, p *printer, cat map[string]any) error {
	w := cmd.OutOrStdout()
	if !p.human() {
		return p.printObject(w, nil, cat, nil)
	}
	return printTable(w, []column{field("MINOR", "minor"), field("LATEST", "latest"), field("VERSIONS", "versions")}, objects(cat["minors"]))
}
