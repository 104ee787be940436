package anvilctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
	cmd := &cobra.Command{Use: "rollout", Short: "Start, watch and control rollouts"}
	var watch bool
	status := &cobra.Command{
		Use:   "status <id>",
		Short: "Show a rollout's progress and machines; with --watch follow its log live until it ends",
		Long: "status shows where a rollout stands. With --watch it follows the rollout's log live (Server-Sent\n" +
			"Events), redrawing the progress as machines move, and exits when the rollout ends: 0 when it\n" +
			"succeeded, 2 when it failed (it then waits for a retry or an abort) or was aborted.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames("rollouts"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return a.watch(cmd.Context(), args[0], cmd.OutOrStdout())
			}
			ro, err := a.rollout(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if a.output != FormatTable {
				return printValue(w, a.output, ro)
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
			p, err := a.c.orgPath("/rollouts")
			if err != nil {
				return err
			}
			body := map[string]any{"pool": start.Pool}
			if start.Revision != 0 {
				body["revision"] = start.Revision
			}
			if start.Machine != "" {
				body["machine"] = start.Machine
			}
			if start.After != "" {
				body["after"] = start.After
			}
			out, err := a.send(cmd.Context(), "POST", p, body, "")
			if err != nil {
				return err
			}
			if a.output != FormatTable {
				return printValue(cmd.OutOrStdout(), a.output, out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s started (%s)\n", str(out["id"]), str(out["status"]))
			return nil
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
		Example:           "  anvilctl rollout undo workers --to-revision 2",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames("pools"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if toRevision < 1 {
				return fmt.Errorf("--to-revision: want a revision number (1 or more)")
			}
			p, err := a.c.orgPath("/pools/%s/revisions/%d/apply", args[0], toRevision)
			if err != nil {
				return err
			}
			out, err := a.send(cmd.Context(), "POST", p, nil, "")
			if err != nil {
				return err
			}
			if a.output != FormatTable {
				return printValue(cmd.OutOrStdout(), a.output, out)
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
			p, err := a.c.orgPath("/rollouts/%s/"+verb, args[0])
			if err != nil {
				return err
			}
			var body any
			if reason != "" {
				body = map[string]any{"reason": reason}
			}
			etag := ""
			if ifMatch != "" {
				etag = strconv.Quote(strings.Trim(ifMatch, `"`))
			}
			out, err := a.send(cmd.Context(), "POST", p, body, etag)
			if err != nil {
				return err
			}
			if a.output != FormatTable {
				return printValue(cmd.OutOrStdout(), a.output, out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s %s (status %s)\n", args[0], done, str(out["status"]))
			return nil
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
		var apiErr *APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || time.Now().After(deadline) {
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

func (a *app) rollout(ctx context.Context, id string) (map[string]any, error) {
	p, err := a.c.orgPath("/rollouts/%s", id)
	if err != nil {
		return nil, err
	}
	ro, _, err := a.c.get(ctx, p, nil)
	return ro, err
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

type sse struct{ id, event, data string }

// readEvents parses a text/event-stream into events.
func readEvents(r io.Reader, fn func(sse) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev sse
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 || ev.event != "" {
				ev.data = strings.Join(data, "\n")
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data = sse{}, nil
		case strings.HasPrefix(line, ":"):
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				ev.id = v
			case "event":
				ev.event = v
			case "data":
				data = append(data, v)
			}
		}
	}
	return sc.Err()
}

var errStreamEnded = errors.New("stream ended")

// watch follows a rollout's log over Server-Sent Events until it ends,
// reconnecting with Last-Event-ID when the connection drops.
func (a *app) watch(ctx context.Context, id string, w io.Writer) error {
	ro, err := a.rollout(ctx, id)
	if err != nil {
		return err
	}
	if a.output != FormatTable {
		return fmt.Errorf("--watch writes for people: leave out -o")
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
	logPath, err := a.c.orgPath("/operations/%s/log", id)
	if err != nil {
		return err
	}
	last := ""
	live := false // past the backlog
	failures := 0
	for {
		hdr := map[string]string{"Accept": "text/event-stream"}
		if last != "" {
			hdr["Last-Event-ID"] = last
		}
		req, err := a.c.request(ctx, "GET", logPath, nil, nil, hdr)
		if err != nil {
			return err
		}
		res, err := a.c.http.Do(req)
		if err == nil && res.StatusCode >= 400 {
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			clear()
			return problem(res, data)
		}
		if err == nil {
			failures = 0
			err = readEvents(res.Body, func(ev sse) error {
				switch ev.event {
				case "", "message":
					var e map[string]any
					if err := decode([]byte(ev.data), &e); err != nil {
						return err
					}
					last = ev.id
					clear()
					fmt.Fprintln(w, entryLine(e))
					if a.env.TTY {
						shown = ""
					}
					// the backlog comes first, before the first status
					// event: refresh for live entries only
					if live {
						if r, err := a.rollout(ctx, id); err == nil {
							ro = r
							bar = progressLine(ro, 30)
						}
					}
					show()
				case "status":
					live = true
					// the status changed: refresh; a failed rollout waits
					// for a retry or an abort, so the watch ends there
					if r, err := a.rollout(ctx, id); err == nil {
						ro = r
						bar = progressLine(ro, 30)
						show()
					}
					switch str(ro["status"]) {
					case "failed", "aborted", "succeeded":
						return errStreamEnded
					}
				case "end":
					return errStreamEnded
				case "error":
					var p APIError
					_ = json.Unmarshal([]byte(ev.data), &p)
					return &p
				}
				return nil
			})
			res.Body.Close()
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
		case err != nil && !isTransient(err):
			clear()
			return err
		}
		// the connection dropped: resume after the last event
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

func isTransient(err error) bool {
	var p *APIError
	if errors.As(err, &p) {
		return p.Status == http.StatusServiceUnavailable
	}
	return true // network errors
}
