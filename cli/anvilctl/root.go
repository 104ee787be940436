// Package anvilctl is the anvil command line client: cobra commands over
// the gateway's HTTP API, with kubectl habits. NewRoot builds the command
// tree against any streams and environment, so tests run it in-process.
package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
)

// Env is what the commands read and write besides the API.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	HTTP           *http.Client
	Now            func() time.Time
	// TTY says whether Stdout is a terminal (the watch redraws in place).
	TTY bool
}

// Main runs anvilctl with os streams and returns the exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tty := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	env := Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, HTTP: http.DefaultClient, Now: time.Now, TTY: tty}
	root := NewRoot(env)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var fail *rolloutFailed
		if errors.As(err, &fail) {
			return 2
		}
		return 1
	}
	return 0
}

// app is one invocation: its environment, global flags and, once resolved,
// its client.
type app struct {
	env    Env
	flags  flagValues
	output string
	cfg    Config
	c      *client
}

// NewRoot builds the command tree.
func NewRoot(env Env) *cobra.Command {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.HTTP == nil {
		env.HTTP = http.DefaultClient
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Stdin == nil {
		env.Stdin = os.Stdin
	}
	a := &app{env: env, flags: flagValues{set: map[string]bool{}}}
	root := &cobra.Command{
		Use:   "anvilctl",
		Short: "anvilctl drives the anvil control plane for bare-metal Kubernetes workers",
		Long: "anvilctl drives the anvil control plane over its HTTP API.\n\n" +
			"Configuration, lowest precedence first: ~/.config/anvil/config.yaml (server, token, org; or --config / " + EnvConfig + "),\n" +
			"then " + EnvServer + ", " + EnvToken + " and " + EnvOrg + ", then --server, --token and --org.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.prepare(cmd) },
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Server, "server", "", "the gateway's URL (env "+EnvServer+", default "+DefaultServer+")")
	pf.StringVar(&a.flags.Token, "token", "", "the API token (env "+EnvToken+")")
	pf.StringVar(&a.flags.Org, "org", "", "the organization (env "+EnvOrg+")")
	pf.StringVar(&a.flags.ConfigPath, "config", "", "the config file (env "+EnvConfig+", default ~/.config/anvil/config.yaml)")
	pf.StringVarP(&a.output, "output", "o", FormatTable, "output format: table, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{FormatTable, FormatJSON, FormatYAML}, cobra.ShellCompDirectiveNoFileComp
	})

	root.AddCommand(a.getCmd(), a.describeCmd(), a.deleteCmd(), a.applyCmd(), a.rolloutCmd(), a.eventsCmd(), a.configCmd(), a.catalogCmd())
	return root
}

// prepare notes which global flags were given and resolves the
// configuration; it runs once the flags are parsed.
func (a *app) prepare(cmd *cobra.Command) error {
	for _, name := range []string{"server", "token", "org", "config"} {
		a.flags.set[name] = cmd.Flags().Changed(name)
	}
	return a.resolve()
}

// resolve reads the configuration.
func (a *app) resolve() error {
	if err := checkFormat(a.output); err != nil {
		return err
	}
	cfg, err := resolveConfig(a.flags, a.env.Getenv)
	if err != nil {
		return err
	}
	a.cfg = cfg
	a.c = &client{cfg: cfg, http: a.env.HTTP}
	return nil
}

// configCmd shows the configuration in effect.
func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Show the configuration in effect"}
	cmd.AddCommand(&cobra.Command{
		Use:   "view",
		Short: "Print the server, organization and (masked) token anvilctl would use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.cfg
			if len(c.Token) > 8 {
				c.Token = c.Token[:4] + "…" + c.Token[len(c.Token)-4:]
			} else if c.Token != "" {
				c.Token = "…"
			}
			format := a.output
			if format == FormatTable {
				format = FormatYAML
			}
			return printValue(cmd.OutOrStdout(), format, c)
		},
	})
	return cmd
}
