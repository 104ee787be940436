// Package anvilctl is the anvil command line client: cobra commands over
// the gateway's HTTP API, with kubectl habits. NewRoot builds the command
// tree against any streams and environment, so tests run it in-process;
// Run also gives the exit code.
package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
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

// Exit codes (docs/cli.md).
const (
	ExitOK    = 0
	ExitError = 1 // any error: usage, network, an API problem; diff: differences found
	// ExitFailed: a watched rollout failed or was aborted; diff: an error.
	ExitFailed      = 2
	ExitTimeout     = 3   // rollout status --timeout ran out
	ExitInterrupted = 130 // interrupted (Ctrl-C), except a get --watch
)

// exitError carries an exit code other than 1; silent ones print nothing
// (diff's "differences found").
type exitError struct {
	code   int
	err    error
	silent bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a command used wrongly: an unknown command or flag, a bad
// argument. It exits 1 and points at --help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErr(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err}
}

// ExitCode is the exit status for an error a command returned.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var fail *rolloutFailed
	if errors.As(err, &fail) {
		return ExitFailed
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	return ExitError
}

// Main runs anvilctl with the process's streams and returns the exit code.
// Ctrl-C cancels the command's context.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	tty := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	env := Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, HTTP: http.DefaultClient, Now: time.Now, TTY: tty}
	return Run(ctx, env, args)
}

// Run runs one anvilctl command line, prints its error (if any) on
// env.Stderr as kubectl does, and returns the exit code.
func Run(ctx context.Context, env Env, args []string) int {
	root := NewRoot(env)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	stderr := env.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	code := ExitCode(err)
	var ue *usageError
	var ee *exitError
	if code == ExitError && cmd != nil && cmd.Annotations[errorExit] != "" && !errors.As(err, &ue) && !errors.As(err, &ee) {
		// diff: differences are 1, so an error is 2 (the configuration, too)
		code = ExitFailed
	}
	switch {
	case errors.As(err, &ee) && ee.silent:
	case code == ExitInterrupted:
		fmt.Fprintln(stderr, "interrupted")
	default:
		fmt.Fprintln(stderr, "error:", err)
	}
	if errors.As(err, &ue) && cmd != nil {
		fmt.Fprintf(stderr, "See '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// app is one invocation: its environment, global flags and, once resolved,
// its client.
type app struct {
	env    Env
	flags  flagValues
	output string
	out    *printer
	cfg    Config
	// api is the typed client of the configuration (client.go)
	api *client.Client
	// tokenOptional: the command needs no token (noToken), so a config
	// file's token left out for another server is only noted, in tokenNote
	tokenOptional bool
	tokenNote     string
}

// errorExit marks the commands whose errors exit 2 (diff: 1 says that
// there are differences).
const errorExit = "anvilctl/error-exit-2"

// noConfig marks the commands that run without the configuration resolved
// (groups, the config commands, version).
const noConfig = "anvilctl/no-config"

// noToken marks the commands that need no token (version, config view):
// when the config file's token is left out because the environment or a
// flag names another server (*StrandedTokenError), they go on without it.
const noToken = "anvilctl/no-token"

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
	if env.Stdout == nil {
		env.Stdout = os.Stdout
	}
	if env.Stderr == nil {
		env.Stderr = os.Stderr
	}
	a := &app{env: env, flags: flagValues{set: map[string]bool{}}}
	root := &cobra.Command{
		Use:   "anvilctl",
		Short: "anvilctl drives the anvil control plane for bare-metal Kubernetes workers",
		Long: "anvilctl drives the anvil control plane over its HTTP API.\n\n" +
			"Configuration, lowest precedence first: the config file's current context (~/.config/anvil/config.yaml, or\n" +
			"--config / " + EnvConfig + "), then " + EnvServer + ", " + EnvToken + " and " + EnvOrg + ", then --server, --token and --org.\n" +
			"--context NAME picks a context of the file instead of the current one and of the environment.\n" +
			"The file's token goes to the file's server only: with " + EnvServer + " or --server naming another server, give\n" +
			EnvToken + " or --token too.\n\n" +
			"Exit codes: 0 success, 1 error, 2 a watched rollout failed, 3 a timeout, 130 interrupted.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.prepare(cmd) },
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Server, "server", "", "the gateway's URL (env "+EnvServer+", default "+DefaultServer+")")
	pf.StringVar(&a.flags.Token, "token", "", "the API token (env "+EnvToken+")")
	pf.StringVar(&a.flags.Org, "org", "", "the organization (env "+EnvOrg+")")
	pf.StringVar(&a.flags.BootServer, "boot-server", "", "the boot service's URL as machines reach it, for iPXE chain URLs (env "+EnvBootServer+")")
	pf.StringVar(&a.flags.Context, "context", "", "the config file's context to use, instead of its current context and the environment")
	pf.StringVar(&a.flags.ConfigPath, "config", "", "the config file (env "+EnvConfig+", default ~/.config/anvil/config.yaml)")
	pf.StringVarP(&a.output, "output", "o", FormatTable, "output format: "+strings.Join(outputFormats, ", "))
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{FormatTable, FormatWide, FormatName, FormatJSON, FormatYAML, "jsonpath=", "jsonpath-file=", "jsonpath-as-json=",
			"custom-columns=", "custom-columns-file="}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	_ = root.RegisterFlagCompletionFunc("context", a.completeContexts)

	root.AddCommand(a.getCmd(), a.describeCmd(), a.deleteCmd(), a.applyCmd(), a.diffCmd(), a.createCmd(), a.bootURLCmd(),
		a.rolloutCmd(), a.eventsCmd(), a.configCmd(), a.catalogCmd(), a.versionCmd())
	groupCommand(root)
	return root
}

// groupCommand makes a command that only holds others print its help when
// called alone, and refuse an unknown subcommand (exit 1) as kubectl does.
func groupCommand(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[noConfig] = "true"
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
		return usageErr(errors.New(msg))
	}
	return cmd
}

// prepare notes which global flags were given, checks -o and, unless the
// command says otherwise, resolves the configuration; it runs once the
// flags are parsed.
func (a *app) prepare(cmd *cobra.Command) error {
	for _, name := range []string{"server", "token", "org", "config", "context", "boot-server"} {
		f := cmd.Flags().Lookup(name)
		// a command's own flag of the same name (config set-context
		// --server) is not the global one
		a.flags.set[name] = f != nil && f.Changed && cmd.Flags().Lookup(name) == cmd.Root().PersistentFlags().Lookup(name)
	}
	out, err := parseOutput(a.output, readFileArg)
	if err != nil {
		return usageErr(err)
	}
	a.out = out
	a.tokenOptional = cmd.Annotations[noToken] != ""
	if cmd.Annotations[noConfig] != "" {
		return nil
	}
	return a.resolve()
}

// resolve reads the configuration.
func (a *app) resolve() error {
	cfg, err := resolveConfig(a.flags, a.env.Getenv)
	var stranded *StrandedTokenError
	if errors.As(err, &stranded) && a.tokenOptional {
		a.tokenNote, err = err.Error(), nil
	}
	if err != nil {
		return err
	}
	a.cfg = cfg
	a.api, err = newClient(cfg, a.env.HTTP)
	return err
}
