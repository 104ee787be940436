package anvilctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/anvil-fleet/anvil/client"
)

// rolloutFailed is a watched rollout that ended without succeeding
// (exit status 2).
type rolloutFailed struct{ id, status, reason string }

func (e *rolloutFailed) Error() string {
	s := fmt.Sprintf("rollout %s %s", e.id, e.status)
	if e.reason != "" {
		s += ": " + e.reason
	}
	return s
}

func (a *app) rolloutCmd() *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "rollout", Short: "Start, watch and control rollouts"})
	var watch bool
	var timeout time.Duration
	status := &cobra.Command{
		Use:   "status <id> | rollout/<id> | pool/<pool>",
		Short: "Show a rollout's progress and machines; with --watch follow its log live until it ends",
		Long: "status shows where a rollout stands (pool/<pool>: the pool's latest rollout). With --watch it follows\n" +
			"the rollout's log live (Server-Sent Events), redrawing the progress as machines move, and exits when\n" +
			"the rollout ends: 0 when it succeeded, 2 when it failed (it then waits for a retry or an abort) or was\n" +
			"aborted. --timeout (which implies --watch) gives up after that long: exit 3.",
		Example:           "  anvilctl rollout status ro-1f2e… --watch\n  anvilctl rollout status pool/workers --timeout 30m",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames("rollouts"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageErr(fmt.Errorf("--timeout: must not be negative"))
			}
			id, err := a.rolloutID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if watch || timeout > 0 {
				if !a.out.human() {
					return usageErr(fmt.Errorf("--watch writes for people: leave out -o"))
				}
				ctx := cmd.Context()
				if timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				err := a.watch(ctx, id, cmd.OutOrStdout())
				if err != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil {
					st := ""
					if ro, rerr := a.rollout(cmd.Context(), id); rerr == nil {
						st = " (status " + str(ro["status"]) + ")"
					}
					return &exitError{code: ExitTimeout, err: fmt.Errorf("timed out after %s waiting for rollout %s to end%s", timeout, id, st)}
				}
				return err
			}
			ro, err := a.rollout(cmd.Context(), id)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			r, _ := lookupResource("rollout")
			if !a.out.human() {
				return a.out.printObject(w, r, ro, nil)
			}
			fmt.Fprintln(w, rolloutHeader(ro))
			fmt.Fprintln(w, progressLine(ro, 30))
			if ms := objects(ro["machines"]); len(ms) > 0 {
				fmt.Fprintln(w)
				return printTable(w, []column{field("MACHINE", "uuid"), field("HOSTNAME", "hostname"), field("PHASE", "phase"),
					field("STEP", "step"), field("STEP STATUS", "step_status"), field("ATTEMPT", "attempt"), field("REASON", "reason")}, ms)
			}
			return nil
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout live until it ends")
	status.Flags().DurationVar(&timeout, "timeout", 0, "with --watch (implied): give up after this long, exit 3 (0: wait as long as it takes)")

	var start struct {
		Pool, Machine, After string
		Revision             int
	}
	startCmd := &cobra.Command{
		Use:     "start --pool <pool> [--revision n] [--machine uuid] [--after rollout]",
		Short:   "Start a rollout by hand: a pool revision to the whole pool, or to one machine",
		Example: "  anvilctl rollout start --pool workers --revision 3\n  anvilctl rollout start --pool workers --machine 4c4c4544-…",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.org()
			if err != nil {
				return err
			}
			out, err := asMap(c.StartRollout(cmd.Context(), client.RolloutStart{Pool: start.Pool, Revision: start.Revision,
				Machine: start.Machine, After: start.After}))
			if err != nil {
				return err
			}
			r, _ := lookupResource("rollout")
			return a.out.printObject(cmd.OutOrStdout(), r, out, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s started (%s)\n", str(out["id"]), str(out["status"]))
				return err
			})
		},
	}
	startCmd.Flags().StringVar(&start.Pool, "pool", "", "the pool (required)")
	startCmd.Flags().IntVar(&start.Revision, "revision", 0, "the pool revision (default: the latest)")
	startCmd.Flags().StringVar(&start.Machine, "machine", "", "roll out only this machine (its UUID)")
	startCmd.Flags().StringVar(&start.After, "after", "", "wait until this rollout succeeded")
	_ = startCmd.MarkFlagRequired("pool")

	var toRevision int
	var undoWatch bool
	undo := &cobra.Command{
		Use:   "undo <pool> --to-revision n",
		Short: "Roll a pool back (or forward) to one of its revisions",
		Long: "undo rolls revision n of the pool out (POST …/pools/{pool}/revisions/{n}/apply): an older revision\n" +
			"is a rollback, the pool's current one re-reboots its machines. It prints the rollout's id; --watch\n" +
			"follows it (as rollout status --watch).",
		Example:           "  anvilctl rollout undo workers --to-revision 2\n  anvilctl rollout undo pool/workers --to-revision 2 --watch",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames("pools"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if toRevision < 1 {
				return usageErr(fmt.Errorf("--to-revision: want a revision number (1 or more)"))
			}
			args[0] = strings.TrimPrefix(args[0], "pool/")
			c, err := a.org()
			if err != nil {
				return err
			}
			out, err := asMap(c.ApplyPoolRevision(cmd.Context(), args[0], toRevision))
			if err != nil {
				return err
			}
			if !a.out.human() {
				return a.out.printObject(cmd.OutOrStdout(), nil, out, nil)
			}
			what := "rolling out revision "
			if b, _ := out["rollback"].(bool); b {
				what = "rolling back to revision "
			}
			id := str(out["rollout"])
			fmt.Fprintf(cmd.OutOrStdout(), "pool/%s %s%s%s\n", args[0], what, str(out["apply_requested"]), rolloutNote(id))
			if undoWatch && id != "" {
				return a.watchStarted(cmd.Context(), id, cmd.OutOrStdout())
			}
			return nil
		},
	}
	undo.Flags().IntVar(&toRevision, "to-revision", 0, "the revision to roll out (required)")
	undo.Flags().BoolVarP(&undoWatch, "watch", "w", false, "follow the rollout it starts live until it ends (as rollout status --watch)")
	_ = undo.MarkFlagRequired("to-revision")

	cmd.AddCommand(status, startCmd, undo,
		a.controlCmd("pause", "paused", "Pause a rollout: no new machine begins; machines already begun finish"),
		a.controlCmd("resume", "resumed", "Resume a paused rollout"),
		a.controlCmd("abort", "aborted", "Abort a rollout: machines not begun are left alone"),
		a.controlCmd("retry", "retried", "Retry a failed rollout from where it stopped"),
	)
	return cmd
}

func (a *app) controlCmd(verb, done, short string) *cobra.Command {
	var reason, ifMatch string
	cmd := &cobra.Command{
		Use:               verb + " <id>",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames("rollouts"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := strings.TrimPrefix(args[0], "rollout/")
			var opts []client.CallOption
			if ifMatch != "" {
				v, err := strconv.ParseUint(strings.Trim(ifMatch, `"`), 10, 64)
				if err != nil || v == 0 {
					return usageErr(fmt.Errorf("--if-match %q: want the rollout's version (its ETag), such as 42", ifMatch))
				}
				opts = append(opts, client.IfMatch(v))
			}
			c, err := a.org()
			if err != nil {
				return err
			}
			control := map[string]func(context.Context, string, string, ...client.CallOption) (*client.Rollout, error){
				"pause": c.PauseRollout, "resume": c.ResumeRollout, "abort": c.AbortRollout, "retry": c.RetryRollout}[verb]
			out, err := asMap(control(cmd.Context(), id, reason, opts...))
			if err != nil {
				return err
			}
			r, _ := lookupResource("rollout")
			return a.out.printObject(cmd.OutOrStdout(), r, out, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s %s (status %s)\n", id, done, str(out["status"]))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the log")
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "only if the rollout is still at this version (its ETag)")
	return cmd
}

func (a *app) completeNames(kind string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, s string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.completeKindAndName(cmd, []string{kind}, s)
	}
}

// rolloutNote names the rollout an apply started, for a line of output.
func rolloutNote(id string) string {
	if id == "" {
		return ""
	}
	return " as rollout/" + id
}

// watchStarted watches a rollout that an apply has just asked for: the
// rollout service starts it a moment after the apply answered, so a 404
// is waited out for a while, saying so.
func (a *app) watchStarted(ctx context.Context, id string, w io.Writer) error {
	deadline := time.Now().Add(30 * time.Second)
	said := false
	for {
		_, err := a.rollout(ctx, id)
		if !isStatus(err, http.StatusNotFound) || time.Now().After(deadline) {
			break
		}
		if !said {
			fmt.Fprintf(a.env.Stderr, "waiting for the rollout service to start rollout/%s\n", id)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return a.watch(ctx, id, w)
}

// rolloutID reads rollout status's argument: an id, rollout/<id>, or
// pool/<pool> for the pool's latest rollout.
func (a *app) rolloutID(ctx context.Context, arg string) (string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		return arg, nil
	}
	switch kind {
	case "rollout", "rollouts", "ro":
		return name, nil
	case "pool", "pools", "mp", "machinepool":
	default:
		return "", usageErr(fmt.Errorf("%q: want a rollout id, rollout/<id> or pool/<pool>", arg))
	}
	r, _ := lookupResource("rollouts")
	items, _, err := a.list(ctx, r, &getOptions{Pool: name, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(items) == 0 {
		return "", fmt.Errorf("pool %s has no rollout", name)
	}
	return str(items[0]["id"]), nil
}

func (a *app) rollout(ctx context.Context, id string) (map[string]any, error) {
	c, err := a.org()
	if err != nil {
		return nil, err
	}
	return asMap(c.GetRollout(ctx, id))
}

func objects(v any) []map[string]any {
	var out []map[string]any
	list, _ := v.([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func rolloutHeader(ro map[string]any) string {
	s := fmt.Sprintf("rollout %s: pool %s, revision %s", str(ro["id"]), str(ro["pool"]), str(ro["revision"]))
	if b, _ := ro["rollback"].(bool); b {
		s += " (rollback)"
	}
	if after := str(ro["after"]); after != "" {
		s += ", after " + after
	}
	return s
}

// waitingFor is why an operation does not move, from its conditions: the
// Progressing condition when it is False (outside the window until …,
// budget full, paused, …) and a drain a budget blocks; "" when it moves.
func waitingFor(o map[string]any) string {
	var parts []string
	for _, c := range objects(o["conditions"]) {
		switch {
		case str(c["type"]) == "Progressing" && str(c["status"]) == "False":
			parts = append([]string{str(c["message"])}, parts...)
		case str(c["type"]) == "DrainBlocked" && str(c["status"]) == "True":
			parts = append(parts, str(c["message"]))
		}
	}
	return strings.Join(parts, "; ")
}

// progressLine is "[#####-----] 1/3 done, 1 in progress, 0 failed: running".
func progressLine(ro map[string]any, width int) string {
	n := func(k string) int { i, _ := strconv.Atoi(str(lookup(ro, "progress."+k))); return i }
	done, total := n("done"), n("total")
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	s := fmt.Sprintf("[%s%s] %d/%d done, %d in progress, %d failed", strings.Repeat("#", filled), strings.Repeat("-", width-filled),
		done, total, n("in_progress"), n("failed"))
	if r := n("released"); r > 0 {
		s += fmt.Sprintf(", %d released", r)
	}
	s += ": " + str(ro["status"])
	if b, _ := ro["aborting"].(bool); b {
		s += " (aborting)"
	}
	if r := str(ro["reason"]); r != "" {
		s += " (" + r + ")"
	}
	if why := waitingFor(ro); why != "" {
		s += "; waiting: " + why
	}
	if eta := str(ro["estimated_done_at"]); eta != "" {
		s += "; done by about " + eta
	}
	return s
}

// entryLine is one log entry for people.
func entryLine(e map[string]any) string {
	parts := []string{str(e["at"])}
	who := str(e["node"])
	if who == "" {
		who = str(e["machine"])
	}
	if who != "" {
		parts = append(parts, who)
	}
	if s := str(e["step"]); s != "" {
		parts = append(parts, s)
	}
	line := strings.Join(parts, "  ") + "  " + str(e["outcome"])
	if m := str(e["message"]); m != "" {
		line += ": " + m
	}
	return line
}

var errStreamEnded = errors.New("stream ended")

// watch follows a rollout's log live (the client's FollowOperationLog:
// Server-Sent Events) until it ends, resuming after the last entry when the
// connection drops.
func (a *app) watch(ctx context.Context, id string, w io.Writer) error {
	ro, err := a.rollout(ctx, id)
	if err != nil {
		return err
	}
	if !a.out.human() {
		return usageErr(fmt.Errorf("--watch writes for people: leave out -o"))
	}
	fmt.Fprintln(w, rolloutHeader(ro))
	bar := progressLine(ro, 30)
	shown := ""
	show := func() {
		if a.env.TTY {
			fmt.Fprint(w, "\r\033[K"+bar)
		} else if bar != shown {
			fmt.Fprintln(w, bar)
		}
		shown = bar
	}
	clear := func() {
		if a.env.TTY {
			fmt.Fprint(w, "\r\033[K")
		}
	}
	show()
	c, err := a.org()
	if err != nil {
		return err
	}
	from := 0     // the next entry: a stream that drops resumes there
	live := false // past the backlog
	failures := 0
	for {
		seen := false // this stream has started
		err = nil
	stream:
		for ev, ferr := range c.FollowOperationLog(ctx, id, from) {
			if ferr != nil {
				err = ferr
				break
			}
			seen = true
			switch ev.Kind {
			case client.LogEventEntry:
				from = ev.Index + 1
				clear()
				fmt.Fprintln(w, entryLine(structToMap(ev.Entry)))
				if a.env.TTY {
					shown = ""
				}
				// the backlog comes first, before the first status event:
				// refresh for live entries only
				if live {
					if r, err := a.rollout(ctx, id); err == nil {
						ro = r
						bar = progressLine(ro, 30)
					}
				}
				show()
			case client.LogEventStatus:
				live = true
				// the status changed: refresh; a failed rollout waits for a
				// retry or an abort, so the watch ends there
				if r, err := a.rollout(ctx, id); err == nil {
					ro = r
					bar = progressLine(ro, 30)
					show()
				}
				switch str(ro["status"]) {
				case "failed", "aborted", "succeeded":
					err = errStreamEnded
					break stream
				}
			case client.LogEventEnd:
				err = errStreamEnded
				break stream
			}
		}
		err = apiErr(err)
		var problem *APIError
		if !seen && errors.As(err, &problem) {
			// the answer to opening the stream: a missing rollout, a role
			// too weak, a service that does not answer
			clear()
			return err
		}
		switch {
		case errors.Is(err, errStreamEnded):
			if r, err := a.rollout(ctx, id); err == nil {
				ro = r
			}
			bar = progressLine(ro, 30)
			show()
			if a.env.TTY {
				fmt.Fprintln(w)
			}
			if st := str(ro["status"]); st != "succeeded" {
				return &rolloutFailed{id: id, status: st, reason: str(ro["reason"])}
			}
			return nil
		case ctx.Err() != nil:
			clear()
			return ctx.Err()
		case err != nil && !transient(err):
			clear()
			return err
		}
		// the stream dropped (or ended early): resume after the last entry
		if seen {
			failures = 0
		}
		failures++
		if failures > 5 {
			return fmt.Errorf("the log stream keeps failing: %v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
		}
	}
}
