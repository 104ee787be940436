package anvilctl

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"
)

// configCmd shows the configuration in effect and edits the config file's
// contexts.
func (a *app) configCmd() *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "config", Short: "Show the configuration in effect; manage the config file's contexts (control planes)"})
	noCfg := map[string]string{noConfig: "true"}

	cmd.AddCommand(&cobra.Command{
		Use:         "view",
		Short:       "Print the server, organization, context and (masked) token anvilctl would use",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{noToken: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.tokenNote != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", a.tokenNote)
			}
			c := a.cfg
			c.Token = maskToken(c.Token)
			switch {
			case a.out.human():
				return printValue(cmd.OutOrStdout(), FormatYAML, c)
			case a.out.data():
				return a.out.printData(cmd.OutOrStdout(), structToMap(c))
			}
			return usageErr(fmt.Errorf("config view prints yaml (the default), json or jsonpath"))
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:         "get-contexts [name…]",
		Short:       "List the config file's contexts; * marks the current one",
		Annotations: noCfg,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, f, err := a.readConfig()
			if err != nil {
				return err
			}
			var rows []map[string]any
			for _, k := range f.Contexts {
				if len(args) > 0 && !containsString(args, k.Name) {
					continue
				}
				cur := ""
				if k.Name == f.CurrentContext {
					cur = "*"
				}
				token := maskToken(k.Token)
				if k.TokenFile != "" {
					token = "file " + k.TokenFile
				}
				rows = append(rows, map[string]any{"current": cur, "name": k.Name, "server": k.Server, "org": k.Org, "token": token,
					"boot-server": k.BootServer})
			}
			for _, n := range args {
				if f.context(n) == nil {
					return fmt.Errorf("context %q does not exist in %s", n, path)
				}
			}
			w := cmd.OutOrStdout()
			switch {
			case a.out.format == FormatName:
				for _, r := range rows {
					fmt.Fprintln(w, r["name"])
				}
				return nil
			case !a.out.human():
				return a.out.print(w, []group{{items: rows}}, false)
			case len(rows) == 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "No contexts in %s (add one with anvilctl config set-context).\n", path)
				return nil
			}
			cols := []column{{Header: "CURRENT", Get: func(o map[string]any) string {
				if o["current"] == "*" {
					return "*"
				}
				return " "
			}}, field("NAME", "name"), field("SERVER", "server"), field("ORG", "org"), field("TOKEN", "token"), field("BOOT SERVER", "boot-server")}
			return printTable(w, cols, rows)
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:         "current-context",
		Short:       "Print the name of the current context",
		Args:        cobra.NoArgs,
		Annotations: noCfg,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, f, err := a.readConfig()
			if err != nil {
				return err
			}
			if f.CurrentContext == "" {
				return fmt.Errorf("no current context in %s (set one with anvilctl config use-context)", path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), f.CurrentContext)
			return nil
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:               "use-context <name>",
		Short:             "Make a context the current one",
		Args:              cobra.ExactArgs(1),
		Annotations:       noCfg,
		ValidArgsFunction: a.completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, f, err := a.readConfig()
			if err != nil {
				return err
			}
			if f.context(args[0]) == nil {
				return fmt.Errorf("context %q does not exist in %s: one of %v", args[0], path, f.contextNames())
			}
			f.CurrentContext = args[0]
			if err := writeConfigFile(path, f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Switched to context %q.\n", args[0])
			return nil
		},
	})

	var sc Context
	var current bool
	set := &cobra.Command{
		Use:   "set-context <name> [--server url] [--token token | --token-file path] [--org org] [--boot-server url]",
		Short: "Create a context, or change the settings given of an existing one",
		Long: "set-context writes a context into the config file: a control plane's gateway URL, the token (or a file\n" +
			"that holds it) and the organization. Settings not given stay as they are. The first context made becomes the\n" +
			"current one. A file from before contexts (server, token and org at the top level) has them moved into a\n" +
			"context named \"default\", which becomes the current one.",
		Example: `  anvilctl config set-context prod --server https://anvil.example.com --token-file ~/.anvil/prod-token --org acme
  anvilctl config set-context lab --server http://127.0.0.1:8080 --token "$ANVIL_TOKEN" --org acme --boot-server http://10.0.0.2:8081
  anvilctl config use-context prod`,
		Args:              cobra.MaximumNArgs(1),
		Annotations:       noCfg,
		ValidArgsFunction: a.completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, f, err := a.readConfig()
			if err != nil {
				return err
			}
			name := ""
			switch {
			case len(args) == 1 && current:
				return usageErr(fmt.Errorf("name a context or pass --current, not both"))
			case len(args) == 1:
				name = args[0]
			case current && f.CurrentContext == "":
				return fmt.Errorf("--current: no current context in %s", path)
			case current:
				name = f.CurrentContext
			default:
				return usageErr(fmt.Errorf("name the context to set, or pass --current"))
			}
			changed := func(n string) bool { return cmd.Flags().Changed(n) }
			if changed("token") && changed("token-file") {
				return usageErr(fmt.Errorf("--token and --token-file: give one"))
			}
			for _, u := range []struct{ flag, v string }{{"server", sc.Server}, {"boot-server", sc.BootServer}} {
				if changed(u.flag) && u.v != "" {
					if err := checkHTTPURL(u.v); err != nil {
						return usageErr(fmt.Errorf("--%s %w", u.flag, err))
					}
				}
			}
			migrateLegacy(&f)
			k := f.context(name)
			verb := "Modified"
			if k == nil {
				f.Contexts = append(f.Contexts, Context{Name: name})
				k = &f.Contexts[len(f.Contexts)-1]
				verb = "Created"
			}
			if changed("server") {
				k.Server = sc.Server
			}
			if changed("org") {
				k.Org = sc.Org
			}
			if changed("boot-server") {
				k.BootServer = sc.BootServer
			}
			if changed("token") {
				k.Token, k.TokenFile = sc.Token, ""
			}
			if changed("token-file") {
				tf := sc.TokenFile
				if tf != "" {
					if tf, err = filepath.Abs(tf); err != nil {
						return err
					}
				}
				k.TokenFile, k.Token = tf, ""
			}
			if f.CurrentContext == "" && len(f.Contexts) == 1 {
				f.CurrentContext = name
			}
			sort.SliceStable(f.Contexts, func(i, j int) bool { return f.Contexts[i].Name < f.Contexts[j].Name })
			if err := writeConfigFile(path, f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s context %q in %s.\n", verb, name, path)
			return nil
		},
	}
	sf := set.Flags()
	sf.StringVar(&sc.Server, "server", "", "the gateway's URL")
	sf.StringVar(&sc.Token, "token", "", "the API token (kept in the file; prefer --token-file)")
	sf.StringVar(&sc.TokenFile, "token-file", "", "a file holding the API token, read at each use")
	sf.StringVar(&sc.Org, "org", "", "the organization")
	sf.StringVar(&sc.BootServer, "boot-server", "", "the boot service's URL as machines reach it (for boot-url)")
	sf.BoolVar(&current, "current", false, "change the current context")
	cmd.AddCommand(set)

	cmd.AddCommand(&cobra.Command{
		Use:               "delete-context <name>",
		Short:             "Remove a context from the config file",
		Args:              cobra.ExactArgs(1),
		Annotations:       noCfg,
		ValidArgsFunction: a.completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, f, err := a.readConfig()
			if err != nil {
				return err
			}
			if f.context(args[0]) == nil {
				return fmt.Errorf("context %q does not exist in %s", args[0], path)
			}
			var keep []Context
			for _, k := range f.Contexts {
				if k.Name != args[0] {
					keep = append(keep, k)
				}
			}
			f.Contexts = keep
			note := ""
			if f.CurrentContext == args[0] {
				f.CurrentContext = ""
				note = " It was the current context: pick another with anvilctl config use-context."
			}
			if err := writeConfigFile(path, f); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Deleted context %q from %s.%s\n", args[0], path, note)
			return nil
		},
	})
	return cmd
}

// readConfig reads the config file the flags and environment name.
func (a *app) readConfig() (string, File, error) {
	path, explicit := configPath(a.flags, a.env.Getenv)
	f, err := readConfigFile(path, explicit)
	return path, f, err
}

// migrateLegacy moves a file's top-level settings (the format before
// contexts) into a context named "default", the current one unless
// another is.
func migrateLegacy(f *File) {
	if f.Server == "" && f.Token == "" && f.Org == "" {
		return
	}
	if f.context("default") != nil {
		return
	}
	f.Contexts = append(f.Contexts, Context{Name: "default", Server: f.Server, Token: f.Token, Org: f.Org})
	f.Server, f.Token, f.Org = "", "", ""
	if f.CurrentContext == "" {
		f.CurrentContext = "default"
	}
}

func (a *app) completeContexts(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	_, f, err := a.readConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return f.contextNames(), cobra.ShellCompDirectiveNoFileComp
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
