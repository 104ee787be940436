package anvilctl

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
)

// tokenOptions are the settings of a new token.
type tokenOptions struct {
	Role        string
	Duration    time.Duration
	MaxMachines int
}

func (a *app) createCmd() *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "create", Short: "Create an organization, an API token or an enrollment token"})

	var displayName string
	org := &cobra.Command{
		Use:   "org <id> [--display-name name]",
		Short: "Create an organization (the bootstrap admin's token)",
		Long: "create org makes an organization (POST /api/v1/orgs). Only the platform's bootstrap admin token\n" +
			"(ANVIL_ADMIN_TOKEN of the control plane) may; then issue the organization's first admin token with\n" +
			"create token --org <id> --role admin, still with the bootstrap token.",
		Example: `  anvilctl create org acme --display-name "ACME Corp" --token "$ANVIL_ADMIN_TOKEN"
  anvilctl create token ops --role admin --org acme --token "$ANVIL_ADMIN_TOKEN"`,
		Aliases: []string{"organization"},
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := asMap(a.api.CreateOrg(cmd.Context(), client.OrgCreate{ID: args[0], DisplayName: displayName}))
			if err != nil {
				return err
			}
			r, _ := lookupResource("org")
			return a.out.printObject(cmd.OutOrStdout(), r, out, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "org/%s created\n", args[0])
				return err
			})
		},
	}
	org.Flags().StringVar(&displayName, "display-name", "", "the organization's name for people")

	var to tokenOptions
	tok := &cobra.Command{
		Use:   "token [name] --role viewer|operator|admin [--duration d]",
		Short: "Issue an API token of the organization (an admin's token); prints the token",
		Long: "create token issues an API token (POST …/tokens) and prints it on standard output, alone, so that\n" +
			"TOKEN=$(anvilctl create token ci --role operator) works. It is shown once: the server keeps only its\n" +
			"hash. -o json|yaml prints the whole answer (the token and its description); -o name is refused, as it\n" +
			"would print only token/<id> and lose the token.",
		Example: `  anvilctl create token ci-bot --role operator --duration 720h
  anvilctl config set-context acme-viewer --token "$(anvilctl create token dashboards --role viewer)"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.refuseNameOutput("create token"); err != nil {
				return err
			}
			switch to.Role {
			case "viewer", "operator", "admin":
			default:
				return usageErr(fmt.Errorf("--role %q: must be viewer, operator or admin", to.Role))
			}
			out, err := a.issueToken(cmd.Context(), "tokens", args, to)
			if err != nil {
				return err
			}
			return a.printIssued(cmd, out, "token")
		},
	}
	tok.Flags().StringVar(&to.Role, "role", "", "viewer (reads), operator (+ machines, rollouts) or admin (+ tokens, clusters, pools); required")
	tok.Flags().DurationVar(&to.Duration, "duration", 0, "the token expires after this long (0: never), such as 720h")
	_ = tok.MarkFlagRequired("role")
	_ = tok.RegisterFlagCompletionFunc("role", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"viewer", "operator", "admin"}, cobra.ShellCompDirectiveNoFileComp
	})

	var eo tokenOptions
	enroll := &cobra.Command{
		Use:   "enrollment-token [name] [--max-machines n] [--duration d]",
		Short: "Issue an enrollment token machines register with on their first boot; prints the token",
		Long: "create enrollment-token issues an enrollment token (POST …/enrollment-tokens; an admin's token) and\n" +
			"prints it on standard output, and nowhere else (standard error, which CI logs keep, never shows it). The\n" +
			"iPXE chain URL machines boot from holds the token: anvilctl boot-url <token> prints it, and\n" +
			"anvilctl boot-url --new issues a token and prints only its chain URL. -o name is refused, as it would\n" +
			"print only enrollment-token/<id> and lose the token. Machines register into the organization,\n" +
			"unassigned: assign them to a pool (apply a Machine with pool:, or pre-register them with their pool\n" +
			"before they boot).",
		Example: `  anvilctl create enrollment-token rack-1 --max-machines 40 --duration 168h
  anvilctl boot-url "$(anvilctl create enrollment-token rack-1)"
  anvilctl boot-url --new rack-2`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.refuseNameOutput("create enrollment-token"); err != nil {
				return err
			}
			out, err := a.issueToken(cmd.Context(), "enrollment-tokens", args, eo)
			if err != nil {
				return err
			}
			if err := a.printIssued(cmd, out, "enrollment-token"); err != nil {
				return err
			}
			if a.cfg.BootServer != "" && a.out.human() {
				// the chain URL holds the token: never on standard error
				fmt.Fprintln(cmd.ErrOrStderr(), "the iPXE chain URL machines boot from: anvilctl boot-url <the token> (it holds the token, so it is not shown here)")
			}
			return nil
		},
	}
	enrollFlags(enroll, &eo)
	cmd.AddCommand(org, tok, enroll)
	return cmd
}

func enrollFlags(cmd *cobra.Command, o *tokenOptions) {
	cmd.Flags().IntVar(&o.MaxMachines, "max-machines", 0, "how many machines it may register in all (0: no cap)")
	cmd.Flags().DurationVar(&o.Duration, "duration", 0, "it registers nothing after this long (0: never expires), such as 168h")
}

// issueToken issues a new token of a kind (tokens: an API token;
// enrollment-tokens) and answers it as the printers walk it: {"token",
// "info"}.
func (a *app) issueToken(ctx context.Context, kind string, args []string, o tokenOptions) (map[string]any, error) {
	if o.Duration < 0 {
		return nil, usageErr(fmt.Errorf("--duration: must not be negative"))
	}
	c, err := a.org()
	if err != nil {
		return nil, err
	}
	name := ""
	if len(args) == 1 {
		name = args[0]
	}
	var expires time.Time
	if o.Duration > 0 {
		expires = a.env.Now().Add(o.Duration).UTC().Truncate(time.Second)
	}
	if kind == "tokens" {
		return asMap(c.CreateToken(ctx, client.TokenCreate{Name: name, Role: client.Role(o.Role), ExpiresAt: expires}))
	}
	return asMap(c.CreateEnrollmentToken(ctx, client.EnrollmentTokenCreate{Name: name, ExpiresAt: expires, MaxMachines: o.MaxMachines}))
}

// refuseNameOutput refuses -o name for a command that issues a token: it
// would print only kind/<id>, and the token, shown once, would be lost.
func (a *app) refuseNameOutput(command string) error {
	if a.out.format != FormatName {
		return nil
	}
	return usageErr(fmt.Errorf("-o name: %s prints a new token, shown only once, which -o name would leave out; "+
		"use the default output (the token alone on standard output), -o json or -o yaml", command))
}

// printIssued prints a new token: alone on standard output (its
// description, never the token, on standard error), or the whole answer
// with -o.
func (a *app) printIssued(cmd *cobra.Command, out map[string]any, what string) error {
	w := cmd.OutOrStdout()
	info, _ := out["info"].(map[string]any)
	if !a.out.human() {
		return a.out.printObject(w, nil, out, nil)
	}
	desc := what + "/" + str(info["id"])
	var details []string
	if n := str(info["name"]); n != "" {
		details = append(details, "name "+n)
	}
	if r := str(info["role"]); r != "" {
		details = append(details, "role "+r)
	}
	if m := str(info["max_machines"]); m != "" {
		details = append(details, "at most "+m+" machines")
	}
	if e := str(info["expires_at"]); e != "" {
		details = append(details, "expires "+e)
	}
	if len(details) > 0 {
		desc += " (" + strings.Join(details, ", ") + ")"
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s created; the token is shown once, keep it now\n", desc)
	_, err := fmt.Fprintln(w, str(out["token"]))
	return err
}

// chainURL is the iPXE chain URL machines boot from with an enrollment
// token, as the console builds it (services/gateway/ui/settings.go).
func chainURL(bootServer, token string) string {
	return strings.TrimRight(bootServer, "/") + "/boot.ipxe?token=" + url.QueryEscape(token)
}

func (a *app) bootURLCmd() *cobra.Command {
	var eo tokenOptions
	var fresh bool
	cmd := &cobra.Command{
		Use:   "boot-url [enrollment-token] | boot-url --new [name] [--max-machines n] [--duration d]",
		Short: "Print the iPXE chain URL machines boot from (DHCP boot file, or an iPXE build)",
		Long: "boot-url prints the iPXE chain URL of the boot service with an enrollment token:\n" +
			"  <boot server>/boot.ipxe?token=<enrollment token>\n" +
			"Put it into DHCP as the boot file of iPXE clients, or build it into an iPXE image (docs/boot.md).\n" +
			"The boot server is the boot service's URL as machines reach it: --boot-server, " + EnvBootServer + ", or the\n" +
			"context's boot-server. Give an enrollment token, or --new to issue one (an admin's token; -o name is\n" +
			"refused with --new, as it would lose the token).\n" +
			"iPXE speaks plain HTTP only, so the URL should be http://.",
		Example: `  anvilctl boot-url anvil_enroll_kq3c…
  anvilctl boot-url --new rack-1 --max-machines 40 --boot-server http://10.0.0.2:8081`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.cfg.BootServer == "" {
				return fmt.Errorf("no boot server: pass --boot-server http://<boot service>:8081, set %s, or anvilctl config set-context <name> --boot-server …", EnvBootServer)
			}
			token := ""
			switch {
			case fresh:
				if err := a.refuseNameOutput("boot-url --new"); err != nil {
					return err
				}
				out, err := a.issueToken(cmd.Context(), "enrollment-tokens", args, eo)
				if err != nil {
					return err
				}
				token = str(out["token"])
				info, _ := out["info"].(map[string]any)
				fmt.Fprintf(cmd.ErrOrStderr(), "enrollment-token/%s created; the URL holds it and is shown once\n", str(info["id"]))
			case len(args) == 1:
				token = args[0]
			default:
				return usageErr(fmt.Errorf("give an enrollment token, or --new to issue one"))
			}
			if strings.HasPrefix(a.cfg.BootServer, "https://") {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: iPXE has no HTTPS; machines need the boot service over plain http://")
			}
			u := chainURL(a.cfg.BootServer, token)
			if !a.out.human() {
				return a.out.printObject(cmd.OutOrStdout(), nil, map[string]any{"url": u}, nil)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), u+"\n")
			return err
		},
	}
	cmd.Flags().BoolVar(&fresh, "new", false, "issue a new enrollment token (the argument, if any, is its name)")
	enrollFlags(cmd, &eo)
	return cmd
}
